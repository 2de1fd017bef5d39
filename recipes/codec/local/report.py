#!/usr/bin/env python
"""Stage 3 of the codec recipe: training curves and held-out mel distance per book count.

Reads ``train.log`` (one JSON record per logged step) and writes ``report.png`` (loss terms and
held-out mel L1 at 1/2/4/8 books over the steps) and a ``RESULTS.md`` table of the last
evaluation. Reconstruction quality as people judge it (PESQ, STOI, ASR WER of the decoded audio)
is ``benchmarks/codec.py``'s job; its table goes to BENCHMARKS.md.

Usage::

    python recipes/codec/local/report.py --exp-dir exp/train --out-dir recipes/codec
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--out-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in (args.exp_dir / "train.log").read_text().splitlines() if line.strip()]
    if not records:
        raise SystemExit(f"{args.exp_dir}/train.log is empty: run stage 1 first")
    evals = [r for r in records if any(k.startswith("mel_l1@") for k in r)]
    books = sorted({int(k.split("@")[1]) for r in evals for k in r if k.startswith("mel_l1@")})

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [r["step"] for r in records]
    for key in ("l1", "l2", "delta", "commit"):
        left.plot(steps, [r[key] for r in records], label=key)
    left.set_yscale("log")
    left.set_xlabel("step")
    left.set_title("training loss terms (normalised log-mel)")
    left.legend()
    for b in books:
        right.plot([r["step"] for r in evals], [r[f"mel_l1@{b}"] for r in evals], marker="o", label=f"{b} books")
    right.set_xlabel("step")
    right.set_ylabel("mean |log-mel error| (nats)")
    right.set_title("held-out Piper sentences")
    right.legend()
    fig.tight_layout()
    fig.savefig(args.out_dir / "report.png", dpi=110)

    last = evals[-1] if evals else {}
    lines = ["# Codec recipe: results", "",
             f"Last step {records[-1]['step']}; held-out mel distance (mean |log-mel error|, nats) at the last evaluation:",
             "", "| books | mel L1 |", "|---|---|"]
    lines += [f"| {b} | {last[f'mel_l1@{b}']:.3f} |" for b in books if f"mel_l1@{b}" in last]
    lines += ["", "![training curves](report.png)", "",
              "PESQ, STOI and ASR WER of the reconstructions: `python benchmarks/codec.py` (BENCHMARKS.md)."]
    (args.out_dir / "RESULTS.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out_dir / 'RESULTS.md'} and report.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
