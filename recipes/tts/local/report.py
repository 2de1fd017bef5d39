#!/usr/bin/env python
"""Stage 3 of the TTS recipe: the loss curves and a table of the last validation.

Reads the checkpoint's log (every step's training loss, the validation losses) and writes
``report.png`` (training and validation cross-entropy, per slot: durations, coarse and fine codec
book) and ``RESULTS.md``. Speech quality as people judge it (ASR WER of the generated speech
against Piper's own, speed, latency) is ``benchmarks/tts.py``'s job (BENCHMARKS.md).

Usage::

    python recipes/tts/local/report.py --checkpoint ~/.cache/burble/tts/exp/checkpoint.pt --out-dir recipes/tts
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def smooth(values: list[float], width: int = 25) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--data", default="", help="a line on the data used, for RESULTS.md")
    args = parser.parse_args(argv)
    state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    log = state["log"]
    if not log:
        raise SystemExit(f"{args.checkpoint} holds no training log: run stage 1 first")
    valid = [r for r in log if "valid" in r]
    keys = [k for k in ("duration", "book0", "book1", "book3") if k in log[-1]]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [r["step"] for r in log]
    left.plot(steps, smooth([r["loss"] for r in log]), label="train (all tokens)")
    left.plot([r["step"] for r in valid], [r["valid"]["loss"] for r in valid], marker="o", label="validation")
    left.set_xlabel("step")
    left.set_ylabel("cross-entropy (nats / token)")
    left.set_title("codec LM loss")
    left.legend()
    for key in keys:
        right.plot([r["step"] for r in valid], [r["valid"][key] for r in valid], marker="o", label=key)
    right.set_xlabel("step")
    right.set_title("validation cross-entropy per slot")
    right.legend()
    fig.tight_layout()
    fig.savefig(args.out_dir / "report.png", dpi=110)

    last = valid[-1]["valid"] if valid else {}
    tokens_per_s = log[-1].get("tokens_per_s", 0.0)
    config = state["config"]
    lines = ["# TTS recipe: results", "",
             f"Codec LM: width {config['width']}, {config['decoder_layers']} decoder + {config['encoder_layers']} "
             f"phoneme-encoder layers, {config['num_books']} codec books per frame, durations up to "
             f"{config['max_duration']} frames. Trained {state['step']} steps at ~{tokens_per_s:.0f} tokens/s "
             "(2 CPU cores, bfloat16 autocast).", ""]
    if args.data:
        lines += [args.data, ""]
    lines += ["Validation cross-entropy at the last evaluation (nats per token; 40 held-out Piper sentences):", "",
              "| tokens | cross-entropy |", "|---|---|"]
    lines += [f"| {k} | {last[k]:.3f} |" for k in ["loss", *keys] if k in last]
    lines += ["", "![loss curves](report.png)", "",
              "Intelligibility (ASR WER of the generated speech vs Piper's), speed and latency: "
              "`python benchmarks/tts.py` (BENCHMARKS.md)."]
    results = args.out_dir / "RESULTS.md"
    kept = ""  # stage 4's draft-heads section survives a rerun of this stage
    if results.is_file() and "\n## Draft heads" in results.read_text():
        kept = "\n## Draft heads" + results.read_text().split("\n## Draft heads", 1)[1]
    results.write_text("\n".join(lines) + "\n" + kept)
    print(f"wrote {args.out_dir / 'RESULTS.md'} and report.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
