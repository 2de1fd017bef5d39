#!/usr/bin/env python
"""Stage 1 of the TTS recipe: train the codec LM (``burble.tts.model.CodecLM``) on CPU.

Teacher-forced cross-entropy over the flattened token stream (durations and codec codes), with
the grammar's slot mask, so every position is scored among the tokens its slot allows. AdamW,
linear warm-up then cosine decay, bfloat16 autocast where the CPU has it. A checkpoint (model,
optimiser, step, the loss log) is written every ``--checkpoint-every`` steps and at the end; a
rerun resumes from it, and the batch of step ``s`` is the same whether or not the run was
interrupted. ``--steps`` may be raised on a later run to train on.

Usage::

    python recipes/tts/local/train.py --data-dir ~/.cache/burble/tts/data --exp-dir ~/.cache/burble/tts/exp --steps 1000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from burble.tts.model import CodecLM, CodecLMConfig, param_count  # noqa: E402
from data import Batches, collate, load_examples  # noqa: E402


def learning_rate(step: int, *, peak: float, warmup: int, total: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def validate(model: CodecLM, examples, amp: bool) -> dict[str, float]:
    model.eval()
    totals: dict[str, list[float]] = {}
    for i in range(0, len(examples), 8):
        batch = collate(examples[i:i + 8])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss, parts = model.loss(**batch)
        for k, v in {"loss": float(loss), **parts}.items():
            totals.setdefault(k, []).append(v)
    model.train()
    return {k: sum(v) / len(v) for k, v in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--books", type=int, default=2, help="codec books the LM predicts per frame")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--decoder-layers", type=int, default=6)
    parser.add_argument("--encoder-layers", type=int, default=3)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=1024, help="longest training window")
    parser.add_argument("--lr", type=float, default=8e-4)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--validate-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--no-amp", action="store_true", help="train in float32 (default: bfloat16 autocast)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.exp_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.exp_dir / "checkpoint.pt"
    inventory = json.loads((args.data_dir / "inventory.json").read_text())["symbols"]

    if checkpoint.is_file():
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        config = CodecLMConfig.from_dict(state["config"])
        print(f"resuming from step {state['step']}", flush=True)
    else:
        state = None
        config = CodecLMConfig(num_phonemes=len(inventory), num_books=args.books, width=args.width, heads=max(1, args.width // 64),
                               decoder_layers=args.decoder_layers, encoder_layers=args.encoder_layers, ff=4 * args.width,
                               dropout=args.dropout)
    torch.manual_seed(0)
    model = CodecLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    step, log = 0, []
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, log = state["step"], state["log"]
        if "rng" in state:
            torch.set_rng_state(state["rng"])  # dropout continues as if never interrupted

    train = load_examples(args.data_dir, "train", config)
    valid = load_examples(args.data_dir, "valid", config)
    tokens = sum(e.inputs.shape[0] for e in train)
    print(f"{param_count(model) / 1e6:.1f} M parameters; {len(train)} training clips ({tokens / 1e6:.2f} M tokens), "
          f"{len(valid)} validation clips", flush=True)
    batches = Batches(train, batch_tokens=args.batch_tokens, max_tokens=args.max_tokens)
    amp = not args.no_amp
    model.train()

    def save() -> None:
        tmp = checkpoint.with_suffix(".tmp")
        torch.save({"config": config.to_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step, "log": log, "inventory": inventory, "rng": torch.get_rng_state()}, tmp)
        os.replace(tmp, checkpoint)

    started = time.perf_counter()
    seen = 0
    while step < args.steps:
        batch = batches.batch(step)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, peak=args.lr, warmup=args.warmup, total=args.steps)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss, parts = model.loss(**batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        step += 1
        seen += int((batch["targets"] != -100).sum())
        entry = {"step": step, "loss": loss.item(), "grad_norm": norm, **parts,
                 "tokens_per_s": seen / (time.perf_counter() - started)}
        if step % args.validate_every == 0 or step == args.steps:
            entry["valid"] = validate(model, valid, amp)
        log.append(entry)
        if step % 10 == 0 or "valid" in entry:
            extra = f" valid {entry['valid']['loss']:.3f}" if "valid" in entry else ""
            print(f"step {step}/{args.steps} loss {entry['loss']:.3f} ({', '.join(f'{k} {v:.2f}' for k, v in parts.items())})"
                  f"{extra} {entry['tokens_per_s']:.0f} tok/s", flush=True)
        if step % args.checkpoint_every == 0 or step == args.steps:
            save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
