#!/usr/bin/env python
"""Stage 4a of the TTS recipe: the voice's own greedy token streams, the draft heads' training data.

Greedy decoding (burble's default, temperature 0) keeps a drafted token only if it is the
codec LM's argmax. Heads trained on Piper's codes (teacher-forced) learn what Piper said, in
contexts the LM never produces itself when it decodes greedily. So the heads learn from what the
voice really decodes: for LJ sentences outside every test set, the exported voice generates its
greedy stream (durations and codes), and ``heads.py --streams-dir`` trains on those streams, whose
next token at every position is the LM's own argmax.

Streams are written in shards (``train_*.safetensors``, ``valid_*.safetensors``: each sentence's
units and token stream); finished shards of the same voice file are kept, so a rerun resumes. ``--workers`` processes
generate side by side, each on one torch thread (the LM decodes batch 1, which one core serves best).

Usage::

    python recipes/tts/local/greedy_streams.py --voice burble/tts/weights/joe.safetensors \\
        --out-dir ~/.cache/burble/tts/streams --sentences 1200 --heldout 60
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def shard_plan(sentences_file: Path, *, count: int, heldout: int, shard_size: int, seed: int) -> list[tuple[str, list]]:
    """``[(shard name, [(id, text), ...]), ...]``: validation shards first, then training."""
    from burble.testing.synthetic import held_out_sentence_ids, read_sentences

    excluded = held_out_sentence_ids(ROOT)  # the TTS test set among them
    pool = [(i, s) for i, s in read_sentences(sentences_file) if i not in excluded and 3 <= len(s.split()) <= 40]
    # A different permutation from prepare.py's (seed + 1): these streams need no Piper audio.
    order = np.random.default_rng(seed + 1).permutation(len(pool))
    picked = [pool[i] for i in order[: heldout + count]]
    plan = []
    for name, split in (("valid", picked[:heldout]), ("train", picked[heldout:])):
        for n, a in enumerate(range(0, len(split), shard_size)):
            plan.append((f"{name}_{n:04d}", split[a:a + shard_size]))
    return plan


def voice_fingerprint(voice_path: Path) -> str:
    """A short hash of the voice file: shards of another voice's streams are made again."""
    import hashlib

    return hashlib.sha256(voice_path.read_bytes()).hexdigest()[:16]


def shard_done(path: Path, fingerprint: str) -> bool:
    if not path.is_file():
        return False
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return (f.metadata() or {}).get("voice_sha256") == fingerprint


def write_shard(voice_path: Path, out_dir: Path, name: str, items: list) -> int:
    """Generate one shard's streams; returns the sentences written (failures are skipped)."""
    import torch
    from safetensors.torch import save_file

    import burble.tts
    from burble.tts import SynthesisOptions
    from burble.tts.normalize import TTSInputError

    voice = burble.tts.load(str(voice_path))
    options = SynthesisOptions(expected_codes=False)  # greedy, drafts on: the same tokens, sooner
    tensors, meta = {}, []
    for sid, text in items:
        try:
            sentences = voice.sentences(text)
        except TTSInputError as e:
            print(f"skip {sid}: {e}", file=sys.stderr)
            continue
        for s, sentence in enumerate(sentences):
            units = voice.units(sentence)
            codes = voice.generate_codes(units, options, seed=0)
            if not codes.tokens or codes.tokens[-1] != voice.model.config.eos:
                continue
            key = len(meta)
            tensors[f"{key}.units"] = torch.tensor(units, dtype=torch.int32)
            tensors[f"{key}.tokens"] = torch.tensor((voice.model.config.bos,) + codes.tokens, dtype=torch.int32)
            meta.append({"id": f"{sid}.{s}", "text": sentence})
    tmp = out_dir / f"{name}.tmp"
    save_file(tensors, str(tmp), metadata={"clips": json.dumps(meta), "voice": voice_path.name,
                                           "voice_sha256": voice_fingerprint(voice_path)})
    os.replace(tmp, out_dir / f"{name}.safetensors")
    return len(meta)


def _worker(args: tuple) -> tuple[str, int, float]:
    voice_path, out_dir, name, items = args
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    return name, write_shard(voice_path, out_dir, name, items), time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voice", required=True, type=Path, help="the exported voice whose streams are generated")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--sentences", type=int, default=1200, help="training sentences")
    parser.add_argument("--heldout", type=int, default=60, help="validation sentences")
    parser.add_argument("--shard-size", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2, help="generating processes (one torch thread each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sentences-file", type=Path, default=ROOT.parent / "shared" / "text" / "ljspeech_sentences.tsv")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    plan = shard_plan(args.sentences_file, count=args.sentences, heldout=args.heldout, shard_size=args.shard_size,
                      seed=args.seed)
    fingerprint = voice_fingerprint(args.voice)
    todo = [(args.voice.resolve(), args.out_dir, name, items) for name, items in plan
            if not shard_done(args.out_dir / f"{name}.safetensors", fingerprint)]
    print(f"{len(plan) - len(todo)} of {len(plan)} shards already written; generating {len(todo)}", flush=True)
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(max(1, args.workers)) as pool:
        for done, (name, n, seconds) in enumerate(pool.imap_unordered(_worker, todo), 1):
            print(f"{name}: {n} streams in {seconds:.0f} s ({done}/{len(todo)}, "
                  f"{time.perf_counter() - started:.0f} s so far)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
