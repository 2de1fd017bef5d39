#!/usr/bin/env python
"""Speculative greedy decoding of Whisper vs plain autoregressive greedy, side by side in one run.

For every drafter: decoder (target) forward passes, mean acceptance length (1 + accepted / drafts),
acceptance rate by draft position, decoder wall time, end-to-end wall time, and whether every clip
decoded to exactly the plain greedy tokens.

Two scenarios on ``../shared/dev-audio`` (every recording, the long one included):

* ``transcribe``: ``WhisperASR.transcribe(audio, beam_size=1, temperatures=(0,), speculative=X)``
  for X in off / ngram / self / mtp (chain, static and dynamic trees) / eagle (chain, and the chain with first-position leaves) / auto (what
  ``burble transcribe --speculative X [--draft-tree T]`` runs);
  end-to-end time includes the log-mel frontend and the encoder.
* ``re-decode``: the streaming case. Each recording of at most 30 s is decoded once from its first
  70 % (the last partial hypothesis), then the whole window is re-decoded plain and with that
  hypothesis as the draft (:class:`~burble.decoding.drafters.PreviousHypothesisDrafter`). Only the
  re-decode is timed (decoder time; the encoder output is shared).

Systems run interleaved clip by clip, so a busy machine slows them alike.

Usage::

    python benchmarks/speculative.py                       # tiny.en, appended to BENCHMARKS.md
    python benchmarks/speculative.py --models tiny.en,base
    python benchmarks/speculative.py --quick               # 4 clips, print only
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from burble.decoding.stats import SpeculativeStats  # noqa: E402 (torch-free; after the path fix)

# name -> TranscribeOptions overrides (``mtp`` rows need the model's shipped draft heads, ``eagle``
# its draft layer).
TRANSCRIBE_SYSTEMS: dict[str, dict] = {
    "off": {"speculative": "off"},
    "ngram": {"speculative": "ngram"},
    "self": {"speculative": "self"},
    "mtp chain": {"speculative": "mtp", "draft_tree": "chain"},
    "mtp static tree": {"speculative": "mtp", "draft_tree": "static"},
    "mtp dynamic tree": {"speculative": "mtp", "draft_tree": "dynamic"},
    "eagle chain": {"speculative": "eagle"},
    "eagle chain k=2": {"speculative": "eagle", "draft_length": 2},
    "eagle chain k=3": {"speculative": "eagle", "draft_length": 3},
    "eagle tree k=2": {"speculative": "eagle", "draft_length": 2, "draft_tree": "static"},
    "eagle tree k=3": {"speculative": "eagle", "draft_length": 3, "draft_tree": "static"},
    "auto": {"speculative": "auto"},
    # The rows above screen one-row passes' logits in int8 (``screen_logits``, the default); these
    # two project in float32 throughout, as every row did before 2026-12-06.
    "off (float32 logits)": {"speculative": "off", "screen_logits": False},
    "eagle chain k=2 (float32 logits)": {"speculative": "eagle", "draft_length": 2, "screen_logits": False},
}


@dataclass
class Tally:
    """Totals of one system over the clips: the decoder's counters plus wall time and identity."""

    stats: SpeculativeStats = field(default_factory=SpeculativeStats)
    total_seconds: float = 0.0
    identical: int = 0
    clips: int = 0

    def add(self, stats: SpeculativeStats, total_seconds: float, identical: bool) -> None:
        self.stats.merge(stats)
        self.total_seconds += total_seconds
        self.identical += int(identical)
        self.clips += 1


def row(model: str, scenario: str, name: str, tally: Tally, base: Tally, timed_total: bool) -> str:
    stats, base_stats = tally.stats, base.stats
    by_position = " / ".join(f"{rate:.2f}" for rate in stats.acceptance_rate_at) or "-"
    passes_ratio = base_stats.target_passes / stats.target_passes if stats.target_passes else float("nan")
    decoder_speedup = base_stats.decoder_seconds / stats.decoder_seconds if stats.decoder_seconds else float("nan")
    total = f"{tally.total_seconds:.1f}" if timed_total else "-"
    total_speedup = f"{base.total_seconds / tally.total_seconds:.2f}x" if timed_total and tally.total_seconds else "-"
    return (
        f"| {model} | {scenario} | {name} | {tally.identical}/{tally.clips} | {stats.generated} | {stats.target_passes} "
        f"| {passes_ratio:.2f}x | {stats.mean_acceptance_length:.2f} | {by_position} | {stats.decoder_seconds:.1f} | {decoder_speedup:.2f}x "
        f"| {total} | {total_speedup} |"
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny.en", help="comma-separated: tiny.en, base")
    parser.add_argument("--draft-length", type=int, default=4, help="k: tokens per draft")
    parser.add_argument("--draft-layers", type=int, default=1, help="decoder layers of the early-exit self-draft")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--systems", default="", help="comma-separated transcribe systems to run (default: all; off always runs)")
    parser.add_argument("--quick", action="store_true", help="4 clips, print only")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)

    import torch

    import burble
    from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
    from burble.asr.options import TranscribeOptions
    from burble.decoding.drafters import PreviousHypothesisDrafter
    from burble.testing.dev_audio import dev_audio_items

    torch.set_num_threads(args.threads)
    items = dev_audio_items()
    if args.quick:
        items = [i for i in items if i.duration_s <= 30.0][:4]
    audio = {item.id: item.load() for item in items}
    seconds_of_audio = sum(len(a) for a in audio.values()) / 16000
    greedy = TranscribeOptions(
        beam_size=1, temperatures=(0.0,), draft_length=args.draft_length, draft_layers=args.draft_layers
    )
    lines = [
        "| model | scenario | drafter | identical tokens | tokens | decoder passes | fewer passes | mean acceptance length "
        "| acceptance by position | decoder s | decoder speedup | end-to-end s | end-to-end speedup |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model_name in [m.strip() for m in args.models.split(",") if m.strip()]:
        asr = burble.load_model(model_name)
        asr.transcribe(audio[items[0].id], greedy)  # warm-up
        shipped = {"mtp": asr.whisper.draft_heads is not None, "eagle": asr.whisper.draft_layer is not None}
        wanted = {n.strip() for n in args.systems.split(",") if n.strip()}
        systems = {n: o for n, o in TRANSCRIBE_SYSTEMS.items()
                   if shipped.get(o["speculative"], True) and (not wanted or n in wanted or n == "off")}
        tallies = {name: Tally() for name in systems}
        redecode = {"off": Tally(), "previous": Tally(), "previous + mtp": Tally()}
        for item in items:
            clip = audio[item.id]
            reference = None
            for name, overrides in systems.items():
                started = time.perf_counter()
                result = asr.transcribe(clip, replace(greedy, **overrides))
                elapsed = time.perf_counter() - started
                tokens = [s.tokens for s in result.segments]
                reference = tokens if reference is None else reference
                tallies[name].add(result.stats, elapsed, tokens == reference)
                print(f"[{model_name} {item.id} {name}] {elapsed:.1f}s passes {result.stats.target_passes} "
                      f"accepted {result.stats.accepted}/{result.stats.drafted}", flush=True)
            if item.duration_s > 30.0:
                continue
            with torch.inference_mode():
                features = asr.encode(pad_or_trim(log_mel_spectrogram(clip)))
                prompt = asr.build_prompt([], greedy)
                head = clip[: int(len(clip) * 0.7)]
                previous = asr.decode_window(asr.encode(pad_or_trim(log_mel_spectrogram(head))), prompt, greedy).tokens
                plain_stats, spec_stats = SpeculativeStats(), SpeculativeStats()
                plain = asr.decode_window(features, prompt, greedy, stats=plain_stats).tokens
                spec = asr.decode_window(
                    features, prompt, greedy, stats=spec_stats, drafter=PreviousHypothesisDrafter(previous)
                ).tokens
                both_stats = SpeculativeStats()
                both = asr.decode_window(  # mtp with a hypothesis: it drafts first, the heads past it
                    features, prompt, replace(greedy, speculative="mtp"), stats=both_stats, previous_hypothesis=previous
                ).tokens if asr.whisper.draft_heads is not None else plain
            redecode["off"].add(plain_stats, 0.0, True)
            redecode["previous"].add(spec_stats, 0.0, spec == plain)
            redecode["previous + mtp"].add(both_stats, 0.0, both == plain)
        for name in systems:
            lines.append(row(model_name, "transcribe", name, tallies[name], tallies["off"], True))
        for name in redecode if asr.whisper.draft_heads is not None else ("off", "previous"):
            lines.append(row(model_name, "re-decode", name, redecode[name], redecode["off"], False))
    table = "\n".join(lines)
    settings = (
        f"dev-audio: {len(items)} recordings, {seconds_of_audio:.0f} s; greedy, temperature 0 only, timestamps on; "
        f"k={args.draft_length}, self-draft {args.draft_layers} decoder layer(s); fp32 CPU; re-decode = the "
        f"whole window with the hypothesis of its first 70 % as the draft"
    )
    print()
    print(settings)
    print(table)
    if args.no_write or args.quick:
        return 0
    machine = f"{platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}, {args.threads} threads"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python benchmarks/speculative.py " + " ".join(argv if argv is not None else sys.argv[1:])
    with args.output.open("a", encoding="utf-8") as f:
        f.write(f"\n## Speculative decoding (Whisper greedy)\n\n`{command.strip()}` — {when} — {machine}\n\n")
        f.write(settings + "\n\n" + table + "\n")
    print(f"appended to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
