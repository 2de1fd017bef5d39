#!/usr/bin/env python
"""Cross-stream batched decoding of Whisper windows, plain and speculative, vs one row at a time.

The streaming server's decodes are re-decodes: each stream's window is decoded again with its
last hypothesis as the draft (:class:`~burble.decoding.drafters.PreviousHypothesisDrafter`).
Here B such re-decodes (B different dev recordings, each drafted from the hypothesis of its
first 70 %) run four ways, side by side, interleaved group by group:

* ``1 x B plain``: one row at a time, plain greedy (what batch-1 decoding costs);
* ``B plain``: the B rows in one batch, plain greedy (rows leave as they finish);
* ``1 x B speculative``: one row at a time with its draft (today's streaming decode);
* ``B speculative``: the B rows in one batch, each with its own draft, ragged acceptance;
* ``B scheduled``: the same, with each pass's draft length chosen by
  :class:`~burble.decoding.schedule.DraftSchedule` (learned over the run, one per batch size).

Columns: decoder passes, milliseconds per pass, decoder seconds for the whole set, speedup over
``1 x B plain``, and whether every row decoded to exactly the plain tokens. The ``B plain`` rows
give the cost of one decoder step against batch size, which is why batching pays on a CPU: a
step reads the weights (the 52k-token output projection above all) once for all rows.

Usage::

    python benchmarks/batched_decoding.py                 # tiny.en, B = 1 2 4 8 16, appended to BENCHMARKS.md
    python benchmarks/batched_decoding.py --batches 1 8 --no-write
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import burble  # noqa: E402
from burble.asr.frontend import log_mel_spectrogram, pad_or_trim  # noqa: E402
from burble.asr.options import TranscribeOptions  # noqa: E402
from burble.asr.processors import window_processors  # noqa: E402
from burble.asr.search import decoding_options  # noqa: E402
from burble.decoding.drafters import PreviousHypothesisDrafter  # noqa: E402
from burble.decoding.generate import generate  # noqa: E402
from burble.decoding.schedule import DraftSchedule  # noqa: E402
from burble.testing.dev_audio import dev_audio_items  # noqa: E402
from common import append_section, machine_description, markdown_table  # noqa: E402

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,))
SYSTEMS = ("1 x B plain", "B plain", "1 x B speculative", "B speculative", "B scheduled")


def encode(asr, audio) -> torch.Tensor:
    return asr.encode(pad_or_trim(log_mel_spectrogram(audio)))


def decode(asr, features: torch.Tensor, drafts=None, schedule=None):
    """One batched call of the decoding core over ``features`` rows (drafts: one list per row)."""
    prompt = asr.build_prompt([], GREEDY)
    whisper = asr.whisper
    drafters = None
    if drafts is not None:
        drafters = [PreviousHypothesisDrafter(d) for d in drafts]
        drafters = drafters[0] if len(drafters) == 1 else drafters
    return generate(
        whisper.text_model(features), torch.tensor([prompt] * features.shape[0]),
        decoding_options(whisper, prompt, GREEDY, 0.0), processors=window_processors(whisper, prompt, GREEDY),
        drafter=drafters, schedule=schedule,
    )  # fmt: skip


def run_system(
    asr, name: str, features: torch.Tensor, drafts: list[list[int]], schedule: DraftSchedule
) -> tuple[list[list[int]], int, float]:
    """``(tokens per row, passes, decoder seconds)`` of one system over one group of rows."""
    rows = range(features.shape[0])
    calls = {
        "1 x B plain": [(features[b : b + 1], None) for b in rows],
        "B plain": [(features, None)],
        "1 x B speculative": [(features[b : b + 1], [drafts[b]]) for b in rows],
        "B speculative": [(features, drafts)],
        "B scheduled": [(features, drafts)],
    }[name]
    tokens, passes, seconds = [], 0, 0.0
    for rows_features, row_drafts in calls:
        started = time.perf_counter()
        result = decode(asr, rows_features, row_drafts, schedule if name == "B scheduled" else None)
        seconds += time.perf_counter() - started
        tokens += result.tokens
        passes += result.stats.target_passes
    return tokens, passes, seconds


def _lengths(schedule: DraftSchedule) -> str:
    cost = schedule.cost
    chosen = ", ".join(f"{k}: {n}" for k, n in sorted(schedule.chosen.items()))
    return f"{chosen} (cost {cost.fixed_ms:.1f} + {cost.per_token_ms:.2f} ms/token)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    machine = machine_description()
    asr = burble.load_model(args.model)
    items = [item for item in dev_audio_items() if item.duration_s <= 30.0]
    n_rows = max(args.batches)
    with torch.inference_mode():
        audio = [items[i % len(items)].load() for i in range(n_rows)]
        features = torch.cat([encode(asr, a) for a in audio])
        drafts = [decode(asr, encode(asr, a[: int(len(a) * 0.7)])).tokens[0] for a in audio]
        decode(asr, features[:2])  # warm-up: first-call allocations
        plain_tokens = [decode(asr, features[b : b + 1]).tokens[0] for b in range(n_rows)]
        table = []
        for batch in args.batches:
            totals = {name: [0, 0.0, True] for name in SYSTEMS}
            schedule = DraftSchedule()
            # Every group of ``batch`` rows over the same n_rows recordings: equal work per batch size.
            for first in range(0, n_rows - batch + 1, batch):
                group = features[first : first + batch]
                for name in SYSTEMS:
                    tokens, passes, seconds = run_system(asr, name, group, drafts[first : first + batch], schedule)
                    totals[name][0] += passes
                    totals[name][1] += seconds
                    totals[name][2] &= tokens == plain_tokens[first : first + batch]
            base = totals["1 x B plain"][1]
            for name in SYSTEMS:
                passes, seconds, same = totals[name]
                table.append([
                    batch, name, passes, f"{1000 * seconds / passes:.1f}", f"{seconds:.2f}", f"{base / seconds:.2f}x",
                    "yes" if same else "NO", _lengths(schedule) if name == "B scheduled" else "",
                ])  # fmt: skip
                print(" | ".join(str(c) for c in table[-1]), flush=True)
    header = [
        "B", "system", "decoder passes", "ms per pass", "decoder s (all rows)", "speedup vs 1 x B plain", "tokens = plain",
        "draft lengths chosen (passes)",
    ]  # fmt: skip
    body = (
        f"{args.model}, {args.threads} threads, {n_rows} dev recordings (<= 30 s) re-decoded, each drafted from "
        f"the hypothesis of its first 70 %; for each B the recordings run in groups of B rows, so every "
        f"row of the table decodes the same {n_rows} windows.\n\n" + markdown_table(header, table)
    )
    append_section(f"Batched decoding, plain and speculative ({args.model})", body, machine=machine, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
