"""The TTS recipe's training examples: shards from ``prepare.py`` -> token streams and batches.

A clip becomes ``(units, stream, features)``: its phoneme units (pads folded into the unit
before them), the flattened token stream ``BOS, DUR, frames..., EOS`` of
:func:`burble.tts.model.token_stream`, and each input position's slot features. Batches are
consecutive clips of the length-sorted list, so little is padding; which clips step ``s`` reads
comes from a generator seeded with ``s``, so a resumed run sees the same batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from burble.tts.model import CodecLMConfig, slot_features, stream_slots, token_stream, unit_durations, unit_ids


@dataclass
class Example:
    units: torch.Tensor      # (U,)
    inputs: torch.Tensor     # (T,) stream[:-1]
    targets: torch.Tensor    # (T,) stream[1:]
    features: torch.Tensor   # (T, 4)
    text: str


def load_examples(data_dir: Path, split: str, config: CodecLMConfig) -> list[Example]:
    examples = []
    for path in sorted(Path(data_dir).glob(f"{split}_*.safetensors")):
        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["clips"])
            for c, clip in enumerate(meta):
                ids = f.get_tensor(f"{c}.ids").long().tolist()
                durations = unit_durations(f.get_tensor(f"{c}.durations").long().tolist())
                units = unit_ids(ids)
                if max(durations) > config.max_duration:
                    continue
                codes = f.get_tensor(f"{c}.codes").long().numpy()[: config.num_books]
                stream = token_stream(config, durations, codes)
                features = slot_features(config, stream_slots(config, stream, len(units)))
                examples.append(Example(torch.tensor(units), torch.tensor(stream[:-1]), torch.tensor(stream[1:]),
                                        features, clip.get("normalized", clip["text"])))
    return examples


def load_streams(streams_dir: Path, split: str, config: CodecLMConfig) -> list[Example]:
    """The voice's own token streams from ``greedy_streams.py`` (``BOS .. EOS``) as examples."""
    examples = []
    for path in sorted(Path(streams_dir).glob(f"{split}_*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for c, clip in enumerate(json.loads(f.metadata()["clips"])):
                units = f.get_tensor(f"{c}.units").long()
                stream = f.get_tensor(f"{c}.tokens").long().tolist()
                features = slot_features(config, stream_slots(config, stream, units.shape[0]))
                examples.append(Example(units, torch.tensor(stream[:-1]), torch.tensor(stream[1:]), features, clip["text"]))
    return examples


def crop(example: Example, max_tokens: int, rng: np.random.Generator) -> Example:
    """A random window of at most ``max_tokens`` positions (the units stay whole)."""
    t = example.inputs.shape[0]
    if t <= max_tokens:
        return example
    a = int(rng.integers(0, t - max_tokens + 1))
    return Example(example.units, example.inputs[a:a + max_tokens], example.targets[a:a + max_tokens],
                   example.features[a:a + max_tokens], example.text)


def collate(examples: list[Example]) -> dict[str, torch.Tensor]:
    b = len(examples)
    u = max(e.units.shape[0] for e in examples)
    t = max(e.inputs.shape[0] for e in examples)
    units = torch.zeros(b, u, dtype=torch.long)
    unit_padding = torch.ones(b, u, dtype=torch.bool)
    inputs = torch.zeros(b, t, dtype=torch.long)
    targets = torch.full((b, t), -100, dtype=torch.long)
    features = torch.zeros(b, t, 4, dtype=torch.long)
    for i, e in enumerate(examples):
        units[i, : e.units.shape[0]] = e.units
        unit_padding[i, : e.units.shape[0]] = False
        n = e.inputs.shape[0]
        inputs[i, :n], targets[i, :n], features[i, :n] = e.inputs, e.targets, e.features
    return {"units": units, "unit_padding": unit_padding, "tokens": inputs, "features": features, "targets": targets}


class Batches:
    """Length-bucketed batches of about ``batch_tokens`` positions; ``batch(step)`` is deterministic."""

    def __init__(self, examples: list[Example], *, batch_tokens: int, max_tokens: int) -> None:
        self.examples = sorted(examples, key=lambda e: e.inputs.shape[0])
        self.batch_tokens = batch_tokens
        self.max_tokens = max_tokens

    def batch(self, step: int, seed: int = 0) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([seed, step])
        n = len(self.examples)
        start = int(rng.integers(0, n))
        chosen: list[Example] = []
        longest = 0
        i = start
        while True:
            e = crop(self.examples[i % n], self.max_tokens, rng)
            longest = max(longest, e.inputs.shape[0])
            if chosen and longest * (len(chosen) + 1) > self.batch_tokens:
                break
            chosen.append(e)
            i += 1 if start < n // 2 else -1  # walk towards the middle so a batch never wraps
            if len(chosen) >= n:
                break
        return collate(chosen)
