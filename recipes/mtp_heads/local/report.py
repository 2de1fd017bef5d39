#!/usr/bin/env python
"""Stage 3 of the MTP-heads recipe: training curves, and the shipped heads' acceptance on real speech.

Writes ``<out>/report.png`` (training loss, held-out head accuracy and chain acceptance against
the step) and ``<out>/RESULTS.md`` (the data and time used, the curve's numbers, and greedy
``transcribe`` over every dev-audio recording with ``--speculative mtp`` for each draft shape:
mean accepted length, acceptance by draft position, decoder passes, identical tokens). Speeds
belong to ``benchmarks/speculative.py`` (an idle machine); this report counts, it does not time.

Usage::

    python recipes/mtp_heads/local/report.py --exp-dir exp --heads heads.safetensors --out recipes/mtp_heads
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def plot(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    trained = [h for h in history if "train_loss" in h]
    axes[0].plot([h["step"] for h in trained], [h["train_loss"] for h in trained], marker="o")
    axes[0].set(title="training loss (sum over heads)", xlabel="step")
    for i in range(len(history[0]["head_accuracy"])):
        axes[1].plot(steps, [h["head_accuracy"][i] for h in history], marker="o", label=f"head {i + 1} (token t+{i + 2})")
    axes[1].set(title="held-out top-1 accuracy", xlabel="step", ylim=(0, 1))
    axes[1].legend()
    axes[2].plot(steps, [h["mean_accepted_length"] for h in history], marker="o")
    axes[2].set(title="held-out chain acceptance (tokens per pass)", xlabel="step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def acceptance_table(asr, shapes: dict) -> list[str]:
    """Greedy ``transcribe`` of every dev-audio recording with each ``TranscribeOptions`` of ``shapes``
    (the first is the plain reference): a markdown table of identical tokens, passes and acceptance."""
    import torch

    from burble.decoding.stats import SpeculativeStats
    from burble.testing.dev_audio import dev_audio_items

    totals = {name: SpeculativeStats() for name in shapes}
    identical = {name: 0 for name in shapes}
    items = dev_audio_items()
    with torch.inference_mode():
        for item in items:
            audio = item.load()
            reference = None
            for name, options in shapes.items():
                result = asr.transcribe(audio, options)
                tokens = [s.tokens for s in result.segments]
                reference = tokens if reference is None else reference
                identical[name] += tokens == reference
                totals[name].merge(result.stats)
    plain = totals[next(iter(shapes))]
    lines = ["| draft | identical | tokens | decoder passes | fewer passes | mean accepted length | acceptance by position |",
             "|---|---|---|---|---|---|---|"]
    for name, stats in totals.items():
        by_position = " / ".join(f"{r:.2f}" for r in stats.acceptance_rate_at) or "-"
        fewer = plain.target_passes / stats.target_passes
        lines.append(f"| {name} | {identical[name]}/{len(items)} | {stats.generated} | {stats.target_passes} | {fewer:.2f}x "
                     f"| {stats.mean_acceptance_length:.2f} | {by_position} |")
    return lines


def dev_acceptance(model_name: str, heads_path: Path) -> list[str]:
    import burble
    from burble.asr.options import TranscribeOptions
    from burble.decoding.mtp import MTPHeads

    asr = burble.load_model(model_name)
    asr.whisper = dataclasses.replace(asr.whisper, draft_heads=MTPHeads.load(heads_path))
    greedy = TranscribeOptions(beam_size=1, temperatures=(0.0,))
    shapes = {"off": greedy} | {name: dataclasses.replace(greedy, speculative="mtp", draft_tree=tree)
                                for name, tree in (("chain", "chain"), ("static tree", "static"), ("dynamic tree", "dynamic"))}
    return acceptance_table(asr, shapes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--heads", required=True, type=Path)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    record = json.loads((args.exp_dir / "history.json").read_text())
    history = record["history"]
    plot(history, args.out / "report.png")
    dev = dev_acceptance(args.model, args.heads)
    curve = ["| epoch | step | train loss | held-out head accuracy (t+2 .. ) | held-out chain acceptance |", "|---|---|---|---|---|"]
    for h in history:
        curve.append(f"| {h['epoch']} | {h['step']} | {h.get('train_loss', '-')} | {' / '.join(f'{a:.3f}' for a in h['head_accuracy'])} "
                     f"| {h['mean_accepted_length']:.2f} |")
    config = record["config"]
    text = f"""# mtp_heads: results ({args.model})

Heads: {config['num_heads']} sequentially dependent draft heads (inner width {config['inner_size']}) over a
{config['draft_vocab_size']}-token draft vocabulary covering {record['draft_vocab_coverage']:.2%} of the training
transcripts' tokens. Data: {record['train_shards']} training shards ({record['train_rows']} decoder positions) and
{record['val_shards']} held-out shards ({record['val_rows']} positions) of synthetic speech (Piper and espeak-ng voices
of LJ Speech sentences, Whisper's own greedy transcripts). Training time: {record['train_seconds'] / 60:.1f} min on
this machine's CPU (1 thread).

![curves](report.png)

## Training curve (held-out synthetic speech)

{chr(10).join(curve)}

## Real dev speech (every ../shared/dev-audio recording, greedy transcribe; not seen in training)

{chr(10).join(dev)}

Mean accepted length counts tokens per verification pass that carried a draft (the verifier's own token
included). Speeds: see BENCHMARKS.md ("Speculative decoding").
"""
    (args.out / "RESULTS.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
