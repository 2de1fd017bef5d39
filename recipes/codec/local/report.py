#!/usr/bin/env python
"""Stage 6 of the codec recipe: training curves and held-out mel distance per book count.

Reads the codec ``<name>``'s ``train.log`` (one JSON record per logged step; a fine-tune's
``finetune/train.log`` after it, its steps counted on from the base run's) and writes
``report_<name>.png`` (loss terms and held-out mel L1 at 1/2/4/8 books over the steps) and a
``RESULTS_<name>.md`` table of the last evaluation; once stage 3 has run, ``RESULTS_<name>_decoder.md``
and ``report_<name>_decoder.png`` from ``refine/train.log`` (held-out mel L1 per book count over the
refinement, from the codec it started from); and once stage 4 has run, ``RESULTS_vocoder.md``
from the distilled vocoder's ``vocoder.pt`` (its held-out mel distance beside the pretrained
generator's). Each part
is written when its input exists. Reconstruction quality as people judge it (PESQ, STOI, ASR WER
of the decoded audio) is ``benchmarks/codec.py``'s job; its table goes to BENCHMARKS.md.

Usage::

    python recipes/codec/local/report.py --exp-dir exp-mel-43hz --vocoder-dir vocoder --name mel-43hz \
        --out-dir recipes/codec
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def vocoder_results(path: Path, out_dir: Path) -> bool:
    """``RESULTS_vocoder.md`` from stage 4's ``vocoder.pt``; False when there is none."""
    if not path.is_file():
        return False
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    e, options = state["evaluation"], state["options"]
    rows = [f"| {name} | {e['right_reach'][who]} ({1000 * e['right_reach'][who] / 22050:.0f} ms) | "
            f"{e[who]['mel_dist']:.3f} | {e[who]['mel_dist@codec']:.3f} |"
            for who, name in (("teacher", f"pretrained ({options['teacher']})"), ("student", "distilled (low-latency)"))]
    lines = ["# Codec recipe: the low-latency vocoder", "",
             f"Causal first stage{'s' if int(options['causal_stages']) > 1 else ''} "
             f"({options['causal_stages']}), {options['lookahead']} frame(s) of lookahead at conv_pre; fit by least "
             f"squares on {e['fit_clips']} training clips in {e['fit_seconds']} s. Held-out Piper clips (the last "
             f"{options['eval_clips']}): mean |log-mel difference| to the original, vocoding the original mel and "
             f"the codec's {e['books']}-book reconstruction.", "",
             f"| generator | right reach, samples | mel dist (original mel) | mel dist (codec, {e['books']} books) |",
             "|---|---|---|---|", *rows, "",
             "PESQ, STOI, ASR WER and latency of the codec through each vocoder: `python benchmarks/codec.py` (BENCHMARKS.md)."]
    (out_dir / "RESULTS_vocoder.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'RESULTS_vocoder.md'}")
    return True


def read_log(path: Path) -> list[dict]:
    """The JSON records of a ``train.log``; none when it does not exist."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def plot_heldout(ax, evals: list[dict], books: list[int], *, xlabel: str, title: str) -> None:
    """Held-out mel L1 per book count over the evaluated steps, on ``ax``."""
    for b in books:
        ax.plot([r["step"] for r in evals], [r[f"mel_l1@{b}"] for r in evals], marker="o", label=f"{b} books")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean |log-mel error| (nats)")
    ax.set_title(title)
    ax.legend()


def decoder_results(log: Path, out_dir: Path, name: str) -> bool:
    """``RESULTS_<name>_decoder.md`` and ``report_<name>_decoder.png`` from stage 3's log; False when there is none."""
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []
    evals = [r for r in records if "mel_l1@4" in r]
    if len(evals) < 2:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    books = sorted({int(k.split("@")[1]) for k in evals[0] if k.startswith("mel_l1@")})
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_heldout(ax, evals, books, xlabel="refinement step (0: the codec it started from)",
                 title="decoder refinement, held-out Piper sentences")
    fig.tight_layout()
    plot = f"report_{name}_decoder.png"
    fig.savefig(out_dir / plot, dpi=110)
    first, last = evals[0], evals[-1]
    named = {"asr": "the ASR-feature loss", "stoi": "the STOI loss through the vocoder"}
    extra_losses = [named[k] for k in named if any(k in r for r in records)]
    losses = " plus " + " and ".join(extra_losses) if extra_losses else ""
    lines = [f"# Codec recipe: the refined decoder of {name}", "",
             f"Stage 3 trained the decoder (grown first if the codec had fewer residual units) on the frozen codes "
             f"for {last['step']} steps, with the reconstruction loss{losses}. Held-out mel "
             "distance (mean |log-mel error|, nats), the first 20 held-out clips:", "",
             "| books | before (stage 2) | after (stage 3) |", "|---|---|---|",
             *[f"| {b} | {first[f'mel_l1@{b}']:.3f} | {last[f'mel_l1@{b}']:.3f} |" for b in books], "",
             f"![refinement]({plot})", ""]
    results = out_dir / f"RESULTS_{name}_decoder.md"
    results.write_text("\n".join(lines))
    print(f"wrote {results} and {plot}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--vocoder-dir", type=Path, help="stage 4's directory (default: <exp-dir>/vocoder)")
    parser.add_argument("--name", required=True, help="the codec's name (it names the files written)")
    parser.add_argument("--out-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    results, plot = f"RESULTS_{args.name}.md", f"report_{args.name}.png"
    wrote = decoder_results(args.exp_dir / "refine" / "train.log", args.out_dir, args.name)
    vocoder_dir = args.vocoder_dir or args.exp_dir / "vocoder"
    wrote = vocoder_results(vocoder_dir / "vocoder.pt", args.out_dir) or wrote
    records = read_log(args.exp_dir / "train.log")
    finetune = read_log(args.exp_dir / "finetune" / "train.log")
    if finetune and not records:
        raise SystemExit(f"{args.exp_dir}/finetune/train.log has no base run before it ({args.exp_dir}/train.log "
                         "is missing or empty): the fine-tune's steps count on from the base run's")
    finetune_from = records[-1]["step"] if finetune else None
    records += [{**r, "step": r["step"] + finetune_from} for r in finetune] if finetune else []
    if not records:
        if wrote:
            print(f"no codec training log in {args.exp_dir}: {results} left as it is")
            return 0
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
    plot_heldout(right, evals, books, xlabel="step", title="held-out Piper sentences")
    if finetune_from is not None:
        for ax in (left, right):
            ax.axvline(finetune_from, color="grey", linestyle=":")
        right.annotate(" fine-tune", (finetune_from, right.get_ylim()[1]), va="top", color="grey")
    fig.tight_layout()
    fig.savefig(args.out_dir / plot, dpi=110)

    last = evals[-1] if evals else {}
    lines = [f"# Codec recipe: results ({args.name})", "",
             f"Last step {records[-1]['step']}"
             + (f" (a fine-tune from step {finetune_from}, the dotted line)" if finetune_from is not None else "")
             + "; held-out mel distance (mean |log-mel error|, nats) at the last evaluation:",
             "", "| books | mel L1 |", "|---|---|"]
    lines += [f"| {b} | {last[f'mel_l1@{b}']:.3f} |" for b in books if f"mel_l1@{b}" in last]
    lines += ["", f"![training curves]({plot})", "",
              "PESQ, STOI and ASR WER of the reconstructions: `python benchmarks/codec.py` (BENCHMARKS.md)."]
    (args.out_dir / results).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out_dir / results} and {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
