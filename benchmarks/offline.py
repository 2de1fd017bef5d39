"""Offline transcription: burble vs faster-whisper (fp32 and int8), same files, same threads, one run.

Prints WER, RTF and the time ratio per model and per subset (short clips, the 80 s and 126 s long
recordings), then a profile of where burble's time goes, and appends the table to BENCHMARKS.md.

    python benchmarks/offline.py [--models tiny.en base] [--beam-size 1] [--threads 2] [--no-write]
        [--baseline-ref REF] [--limit N] [--speculative auto] [--rounds 2] [--in-process]

``--speculative X`` decodes burble's greedy windows with that drafter (``burble transcribe
--speculative X``; lossless, so the text is the same) and adds a ``burble fp32 speculative X`` row.

Every system runs in a process of its own (a worker that loads one model, warms it up and times
every file), ``--rounds`` times, taking turns, and each file keeps its fastest run. In one process,
a faster-whisper call before each burble call made burble's long files ~30% slower (23.0 s against
17.2 s: CTranslate2's model evicts burble's weights from the caches), so the peers no longer share
burble's process. ``--in-process`` restores the old way (all systems in this process, per file).

``--baseline-ref REF`` adds a ``burble fp32 before (REF)`` row per subset, measured against a
temporary worktree of REF, beside ``burble fp32 after (working tree)`` (and the same pair for
``--speculative X``): one run gives a change's before/after rows. ``--limit N`` takes only the
first N files (a quick check of the script).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import burble  # noqa: E402
from common import add_baseline_options, append_section, machine_description, markdown_table  # noqa: E402
from common import ROOT, measure_in_tree, short_ref, worker_argv, worktree_at, write_worker_output  # noqa: E402

WARM_UP_ID = "jfk_inaugural_ask_not"
WARM_UP_KEY = "__warm_up__"  # the warm-up clip among a worker's arrays (not timed)


def run_burble(asr, audio, beam_size, speculative="off"):
    return asr.transcribe(audio, beam_size=beam_size, condition_on_previous_text=False, speculative=speculative).text


def run_peer(model, audio, beam_size):
    segments, _ = model.transcribe(audio, beam_size=beam_size, condition_on_previous_text=False, language="en")
    return " ".join(s.text.strip() for s in segments)


def subset_of(item) -> str:
    return "long" if item.duration_s > 60 else "short"


def best_of(runs: list[dict[str, dict[str, list]]]) -> dict[str, dict[str, list]]:
    """Per model and clip, the fastest of several worker runs' ``[seconds, text]``."""
    return {name: {clip: min((run[name][clip] for run in runs), key=lambda r: r[0]) for clip in runs[0][name]} for name in runs[0]}


# What a worker measures (``--worker-system``): the row label of each, given the speculative option.
WORKER_SYSTEMS = ("burble", "burble-speculative", "fw-float32", "fw-int8")


def system_label(system: str, speculative: str) -> str:
    return {
        "burble": "burble fp32",
        "burble-speculative": f"burble fp32 speculative {speculative}",
        "fw-float32": "faster-whisper fp32",
        "fw-int8": "faster-whisper int8",
    }[system]


def measure_system(
    system: str, name: str, audio: dict[str, np.ndarray], beam_size: int, repeats: int, speculative: str, threads: int
) -> dict[str, list]:
    """``{id: [best seconds, text]}`` for every clip but the warm-up one (:data:`WARM_UP_KEY`).

    Of burble it uses only ``burble.load_model`` and ``transcribe``, which every baseline ref has,
    so it also runs as a ``--baseline-ref`` worker.
    """
    if system.startswith("fw-"):
        from burble.testing.peers import faster_whisper_model

        model = faster_whisper_model(name, system[3:], threads)
        run = lambda samples: run_peer(model, samples, beam_size)  # noqa: E731
    else:
        asr = burble.load_model(name)
        drafter = speculative if system == "burble-speculative" else "off"
        run = lambda samples: run_burble(asr, samples, beam_size, drafter)  # noqa: E731
    run(audio[WARM_UP_KEY])  # warm-up (first-call compilation, allocator pools)
    results = {}
    for clip_id, samples in audio.items():
        if clip_id == WARM_UP_KEY:
            continue
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            text = run(samples)
            best = min(best, time.perf_counter() - start)
        results[clip_id] = [best, text]
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny.en"])
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="time each file this many times (min is kept)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--limit", type=int, help="only the first N files (a quick check of the script)")
    parser.add_argument("--speculative", default="off", help="also time burble with this drafter (off, ngram, self, mtp, eagle, auto)")
    parser.add_argument("--rounds", type=int, default=2, help="worker runs per system, taking turns (each file keeps its best)")
    parser.add_argument("--in-process", action="store_true", help="run every system in this process, file by file (the old way)")
    parser.add_argument("--worker-system", choices=WORKER_SYSTEMS, default="burble", help=argparse.SUPPRESS)
    add_baseline_options(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.worker_output:  # a worker run (see measure_in_tree): one system, on the parent's audio
        audio = dict(np.load(args.worker_audio))
        write_worker_output(args.worker_output, {
            name: measure_system(args.worker_system, name, audio, args.beam_size, args.repeats, args.speculative, args.threads)
            for name in args.models
        })  # fmt: skip
        return 0
    from burble.audio.io import load_audio
    from burble.metrics.wer import corpus_wer
    from burble.testing import dev_audio_items, untranscribed_items
    from burble.testing.peers import faster_whisper_model

    machine = machine_description()
    items = (dev_audio_items() + untranscribed_items())[: args.limit]
    audio = {item.id: load_audio(str(item.audio_path)) for item in items}
    warm_up_item = next(item for item in dev_audio_items() if item.id == WARM_UP_ID)
    warm_up = audio[WARM_UP_ID] if WARM_UP_ID in audio else load_audio(str(warm_up_item.audio_path))
    # Workers: one process per system and round, taking turns so a drift in machine load hits all;
    # each clip keeps its best. With a baseline, before and after are burble workers of the same shape.
    command = worker_argv(sys.argv[1:] if argv is None else argv)
    arrays = {**audio, WARM_UP_KEY: warm_up}
    plan: list[tuple[str, Path, str]] = []  # (row label, burble tree, worker system)
    trees = contextlib.ExitStack()  # the baseline's worktree, removed once its workers are done
    if args.baseline_ref:
        tree = trees.enter_context(worktree_at(args.baseline_ref))
        plan += [(f"burble fp32 before ({short_ref(args.baseline_ref)})", tree, "burble"), ("burble fp32 after (working tree)", ROOT, "burble")]
        if args.speculative != "off":
            plan += [
                (f"burble fp32 speculative {args.speculative} before ({short_ref(args.baseline_ref)})", tree, "burble-speculative"),
                (f"burble fp32 speculative {args.speculative} after (working tree)", ROOT, "burble-speculative"),
            ]
    elif not args.in_process:
        plan.append((system_label("burble", args.speculative), ROOT, "burble"))
        if args.speculative != "off":
            plan.append((system_label("burble-speculative", args.speculative), ROOT, "burble-speculative"))
    if not args.in_process:
        plan += [(system_label(s, args.speculative), ROOT, s) for s in ("fw-float32", "fw-int8")]
    runs: dict[str, list] = {label: [] for label, _, _ in plan}
    with trees:
        for round_ in range(args.rounds if plan else 0):
            for label, tree, system in plan[round_ % len(plan) :] + plan[: round_ % len(plan)]:
                print(f"round {round_ + 1}/{args.rounds}: {label}", file=sys.stderr)
                runs[label].append(measure_in_tree(tree, __file__, [*command, "--worker-system", system], arrays))
    workers = {label: best_of(results) for label, results in runs.items()}
    rows, profiles = [], []
    for name in args.models:
        asr = burble.load_model(name)
        systems = {}
        if args.in_process:
            systems = {
                "faster-whisper fp32": lambda a, m=faster_whisper_model(name, "float32", args.threads): run_peer(m, a, args.beam_size),
                "faster-whisper int8": lambda a, m=faster_whisper_model(name, "int8", args.threads): run_peer(m, a, args.beam_size),
            }
        if args.in_process and not args.baseline_ref:
            systems = {"burble fp32": lambda a, asr=asr: run_burble(asr, a, args.beam_size), **systems}
            if args.speculative != "off":
                systems = {f"burble fp32 speculative {args.speculative}": lambda a, asr=asr: run_burble(asr, a, args.beam_size, args.speculative), **systems}
        for system in systems.values():  # warm-up (first-call compilation, allocator pools)
            system(warm_up)
        labels = list(workers) + list(systems)
        results = {s: {"short": [0.0, 0.0, []], "long": [0.0, 0.0, []]} for s in labels}

        def record(system: str, item, seconds: float, text: str) -> None:
            cell = results[system][subset_of(item)]
            cell[0] += seconds
            cell[1] += item.duration_s
            if item.text:
                cell[2].append((item.text, text))

        for position, item in enumerate(items):
            for label, measured in workers.items():
                if item.id in measured[name]:
                    record(label, item, *measured[name][item.id])
            # The systems take turns going first: the first after another file (and after the
            # peers' runs) finds the caches cold, which once made the first burble row look ~15% slower.
            turn = position % max(1, len(systems))
            for system, fn in list(systems.items())[turn:] + list(systems.items())[:turn]:
                best = float("inf")
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    text = fn(audio[item.id])
                    best = min(best, time.perf_counter() - start)
                record(system, item, best, text)
            if systems:
                print(f"{name} {item.id}: done", file=sys.stderr)
        for subset in ("short", "long"):
            base_time = results["faster-whisper fp32"][subset][0]
            if not base_time:
                continue  # no file of this subset (--limit)
            for system in labels:
                seconds, audio_seconds, pairs = results[system][subset]
                wer = f"{100 * corpus_wer(pairs):.1f}%" if pairs else "n/a"
                rows.append([name, subset, system, f"{audio_seconds:.0f}", wer, f"{seconds:.1f}", f"{seconds / audio_seconds:.3f}", f"{seconds / base_time:.2f}"])
        if "long_kathleen_20prompts" not in audio:
            continue  # --limit left the profiled recording out
        profile = cProfile.Profile()
        profile.enable()
        run_burble(asr, audio["long_kathleen_20prompts"], args.beam_size)
        profile.disable()
        buffer = io.StringIO()
        pstats.Stats(profile, stream=buffer).sort_stats("tottime").print_stats(8)
        profiles.append((name, buffer.getvalue()))
    table = markdown_table(["model", "subset", "system", "audio s", "WER", "time s", "RTF", "time / fw fp32"], rows)
    notes = "\n".join(
        f"\nProfile of burble {name} on the 80 s recording (top functions by own time):\n\n```\n"
        + "\n".join(line for line in text.splitlines() if line.strip())[:2500] + "\n```" for name, text in profiles
    )
    append_section(
        f"Offline transcription vs faster-whisper (beam {args.beam_size}, {args.threads} threads, "
        + ("one process)" if args.in_process else f"a process per system, best of {args.rounds} rounds)"),
        table + "\n" + notes,
        machine=machine,
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
