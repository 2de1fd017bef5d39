"""Offline transcription: burble vs faster-whisper (fp32 and int8), same files, same threads, one run.

Prints WER, RTF and the time ratio per model and per subset (short clips, the 80 s and 126 s long
recordings), then a profile of where burble's time goes, and appends the table to BENCHMARKS.md.

    python benchmarks/offline.py [--models tiny.en base] [--beam-size 1] [--threads 2] [--no-write]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import burble  # noqa: E402
from burble.audio.io import load_audio  # noqa: E402
from burble.metrics.wer import corpus_wer  # noqa: E402
from burble.testing import dev_audio_items, untranscribed_items  # noqa: E402
from burble.testing.peers import faster_whisper_model  # noqa: E402
from common import append_section, machine_description, markdown_table  # noqa: E402


def run_burble(asr, audio, beam_size):
    return asr.transcribe(audio, beam_size=beam_size, condition_on_previous_text=False).text


def run_peer(model, audio, beam_size):
    segments, _ = model.transcribe(audio, beam_size=beam_size, condition_on_previous_text=False, language="en")
    return " ".join(s.text.strip() for s in segments)


def subset_of(item) -> str:
    return "long" if item.duration_s > 60 else "short"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny.en"])
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="time each file this many times (min is kept)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    machine = machine_description()
    items = dev_audio_items() + untranscribed_items()
    audio = {item.id: load_audio(str(item.audio_path)) for item in items}
    rows, profiles = [], []
    for name in args.models:
        asr = burble.load_model(name)
        systems = {
            "burble fp32": lambda a, asr=asr: run_burble(asr, a, args.beam_size),
            "faster-whisper fp32": lambda a, m=faster_whisper_model(name, "float32", args.threads): run_peer(m, a, args.beam_size),
            "faster-whisper int8": lambda a, m=faster_whisper_model(name, "int8", args.threads): run_peer(m, a, args.beam_size),
        }
        for system in systems.values():  # warm-up (first-call compilation, allocator pools)
            system(audio["jfk_inaugural_ask_not"])
        results = {s: {"short": [0.0, 0.0, []], "long": [0.0, 0.0, []]} for s in systems}
        for item in items:
            for system, fn in systems.items():
                best = float("inf")
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    text = fn(audio[item.id])
                    best = min(best, time.perf_counter() - start)
                cell = results[system][subset_of(item)]
                cell[0] += best
                cell[1] += item.duration_s
                if item.text:
                    cell[2].append((item.text, text))
            print(f"{name} {item.id}: done", file=sys.stderr)
        for subset in ("short", "long"):
            base_time = results["faster-whisper fp32"][subset][0]
            for system in systems:
                seconds, audio_seconds, pairs = results[system][subset]
                wer = f"{100 * corpus_wer(pairs):.1f}%" if pairs else "n/a"
                rows.append([name, subset, system, f"{audio_seconds:.0f}", wer, f"{seconds:.1f}", f"{seconds / audio_seconds:.3f}", f"{seconds / base_time:.2f}"])
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
        f"Offline transcription vs faster-whisper (beam {args.beam_size}, {args.threads} threads)",
        table + "\n" + notes,
        machine=machine,
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
