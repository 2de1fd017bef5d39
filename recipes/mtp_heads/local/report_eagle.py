#!/usr/bin/env python
"""Stage 3 of the MTP-heads recipe with ``--drafter eagle``: curves, and the layer's acceptance on real speech.

Writes ``<out>/report_eagle.png`` (training losses per unrolled pass, held-out per-pass accuracy
and chain acceptance against the step) and ``<out>/RESULTS_eagle.md`` (data and time used, the
curve's numbers, and greedy ``transcribe`` of every dev-audio recording with ``--speculative
eagle`` at draft lengths 2-6: identical tokens, decoder passes, mean accepted length, acceptance
by position). Speeds belong to ``benchmarks/speculative.py`` (an idle machine); this report counts.

Usage::

    python recipes/mtp_heads/local/report_eagle.py --exp-dir exp --layer eagle.safetensors --out recipes/mtp_heads
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


# RESULTS_eagle.md from this line on is written by hand (what shipped, measurements); a rerun keeps it.
NOTES_MARKER = "<!-- hand-written notes: report_eagle.py keeps everything below -->"

def plot(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    trained = [h for h in history if "train_token_loss" in h]
    passes = len(history[0]["pass_accuracy"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for s in range(passes):
        axes[0].plot([h["step"] for h in trained], [h["train_token_loss"][s] for h in trained], marker="o", label=f"pass {s + 1}")
    axes[0].set(title="training token loss (cross-entropy)", xlabel="step")
    axes[0].legend()
    for s in range(passes):
        axes[1].plot(steps, [h["pass_accuracy"][s] for h in history], marker="o", label=f"drafted token {s + 1}")
    axes[1].set(title="held-out top-1 accuracy", xlabel="step", ylim=(0, 1))
    axes[1].legend()
    axes[2].plot(steps, [h["mean_accepted_length"] for h in history], marker="o")
    axes[2].set(title=f"held-out chain acceptance (k={passes}, tokens per pass)", xlabel="step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def dev_acceptance(model_name: str, layer_path: Path, lengths: list[int]) -> list[str]:
    import burble
    from burble.asr.loaded import _layer_on
    from burble.asr.options import TranscribeOptions
    from burble.decoding.eagle import EagleLayer
    from report import acceptance_table

    asr = burble.load_model(model_name)
    asr.whisper = dataclasses.replace(asr.whisper, draft_layer=_layer_on(EagleLayer.load(layer_path), asr.whisper.model))
    greedy = TranscribeOptions(beam_size=1, temperatures=(0.0,))
    shapes = {"off": greedy} | {f"chain k={k}": dataclasses.replace(greedy, speculative="eagle", draft_length=k) for k in lengths}
    # The chain with the first position's next-best guesses as leaves (``--draft-tree static``).
    shapes |= {f"chain k={k} + first-position leaves": dataclasses.replace(greedy, speculative="eagle", draft_length=k, draft_tree="static")
               for k in lengths[:2]}
    return acceptance_table(asr, shapes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--layer", required=True, type=Path)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--lengths", default="2,3,4,6", help="draft lengths measured on the dev speech")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    record = json.loads((args.exp_dir / "eagle_history.json").read_text())
    history = record["history"]
    plot(history, args.out / "report_eagle.png")
    dev = dev_acceptance(args.model, args.layer, [int(k) for k in args.lengths.split(",")])
    curve = ["| epoch | step | train token loss per pass | held-out accuracy per drafted token | held-out chain acceptance |",
             "|---|---|---|---|---|"]
    for h in history:
        losses = " / ".join(f"{x:.2f}" for x in h.get("train_token_loss", [])) or "-"
        curve.append(f"| {h['epoch']} | {h['step']} | {losses} | {' / '.join(f'{a:.3f}' for a in h['pass_accuracy'])} "
                     f"| {h['mean_accepted_length']:.2f} |")
    config = record["config"]
    kd_weight = record.get("kd_weight")
    if kd_weight is None:  # a history written before it recorded the option: the checkpoint's arguments
        import torch

        kd_weight = torch.load(args.exp_dir / "eagle_checkpoint.pt", weights_only=False, map_location="cpu")["config"].get("kd_weight")
    inputs = "its final-norm state"
    if config.get("feature_layers"):
        inputs = f"its final-norm state fused with the outputs of decoder blocks {', '.join(map(str, config['feature_layers']))} (EAGLE-3)"
    soft = f" plus {kd_weight:g} x the KL divergence from Whisper's own distribution" if kd_weight else ""
    text = f"""# mtp_heads, `--drafter eagle`: results ({args.model})

Draft layer: one decoder block (width {config['hidden_size']}, {config['num_attention_heads']} heads, MLP {config['mlp_size']})
started from Whisper's last block, over a {config['draft_vocab_size']}-token draft vocabulary covering
{record['draft_vocab_coverage']:.2%} of the training transcripts' tokens; {record['passes']} drafting steps unrolled in
training. A verified position's input feature is {inputs}; token loss: cross-entropy of Whisper's greedy
token{soft}. Data: {record['train_clips']} training clips ({record['train_rows']} decoder positions) and {record['val_clips']}
held-out clips ({record['val_rows']} positions) of synthetic speech (Piper and espeak-ng voices of LJ Speech sentences,
Whisper's own greedy transcripts; the clips stage 0 made with `--augment` also have room, noise, speed, phone-band and
level effects, `local/augment.py`). Training time: {record['train_seconds'] / 60:.1f} min on this machine's CPU.

![curves](report_eagle.png)

## Training curve (held-out synthetic speech)

{chr(10).join(curve)}

## Real dev speech (every ../shared/dev-audio recording, greedy transcribe; not seen in training)

{chr(10).join(dev)}

Mean accepted length counts tokens per verification pass that carried a draft (the verifier's own token
included). Speeds: see BENCHMARKS.md ("Speculative decoding").
"""
    results = args.out / "RESULTS_eagle.md"
    if results.exists() and NOTES_MARKER in results.read_text():  # keep the hand-written notes below the marker
        old = results.read_text()
        text += "\n" + old[old.index(NOTES_MARKER):]
    results.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
