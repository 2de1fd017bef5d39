"""Batched offline transcription: burble's batched windows vs faster-whisper's BatchedInferencePipeline.

Both run the same CTranslate2 tiny.en weights (burble converts them to PyTorch fp32; faster-whisper
runs them with CTranslate2 fp32), with identical settings: greedy search, temperature 0 only, no
timestamps (faster-whisper's batched default), no previous-text prompt, the same torch/CT2 thread
count, and the same windows - files of at most 30 s are one window each, longer recordings are
cut by burble's silero-vad segmenter and faster-whisper gets those cuts as ``clip_timestamps``.

Two corpora, in one run, each at batch sizes 1/4/8:

* ``short``: the 20 transcribed dev clips of at most 30 s. burble batches windows *across
  files*; faster-whisper's pipeline takes one audio at a time, so its batches hold one window.
* ``long``: two long recordings with references (the 80 s dev recording and all short clips
  joined with 0.5 s pauses). Both batch the windows of one recording.

Throughput is audio seconds per wall second and per CPU second of the process (model loading and
VAD excluded, feature extraction included); WER is corpus WER with Whisper's normaliser. The
machine may be shared: compare the ratios (the CPU-time ones are the steadier), not the absolute
numbers.

    python benchmarks/batch.py [--threads 1] [--batch-sizes 1 4 8] [--repeats 1] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import burble  # noqa: E402
from burble.asr.options import TranscribeOptions  # noqa: E402
from burble.batch.batched import BatchedTranscriber, BatchOptions  # noqa: E402
from burble.batch.segment import Segmenter  # noqa: E402
from burble.metrics.wer import corpus_wer  # noqa: E402
from burble.testing import dev_audio_items  # noqa: E402
from burble.testing.peers import faster_whisper_model  # noqa: E402
from common import append_section, machine_description, markdown_table  # noqa: E402

SR = 16000
OPTIONS = TranscribeOptions(beam_size=1, temperatures=(0.0,), without_timestamps=True, condition_on_previous_text=False)


def corpora() -> dict[str, list[tuple[str, np.ndarray, str]]]:
    """``{"short": [(id, audio, reference)...], "long": [...]}``."""
    items = dev_audio_items()
    short = [(it.id, it.load(), it.text) for it in items if it.duration_s <= 30]
    pause = np.zeros(SR // 2, np.float32)
    joined = np.concatenate([part for _, audio, _ in short for part in (audio, pause)])
    long = [(it.id, it.load(), it.text) for it in items if it.duration_s > 30]
    long.append(("dev_short_joined", joined, " ".join(text for _, _, text in short)))
    return {"short": short, "long": long}


def run_burble(asr, corpus, windows, batch_size: int, options: TranscribeOptions = OPTIONS) -> list[str]:
    transcriber = BatchedTranscriber(asr, options, BatchOptions(batch_size=batch_size))
    results = dict(transcriber.transcribe_many([(key, audio) for key, audio, _ in corpus], windows))
    return [results[key].text for key, _, _ in corpus]


def run_faster_whisper(pipeline, corpus, windows, batch_size: int) -> list[str]:
    texts = []
    for key, audio, _ in corpus:
        clips = [{"start": c.start / SR, "end": c.end / SR} for c in windows[key]]
        segments, _ = pipeline.transcribe(
            audio, language="en", beam_size=1, temperature=0.0, without_timestamps=True, batch_size=batch_size,
            vad_filter=False, clip_timestamps=clips if len(audio) > 30 * SR else None,
            condition_on_previous_text=False,
        )
        texts.append(" ".join(s.text.strip() for s in segments))
    return texts


def timed(fn, repeats: int):
    """``(wall seconds, CPU seconds of this process, output)``, the fastest of ``repeats`` runs.

    On a shared machine the wall time depends on how much CPU the scheduler gave us; the CPU time
    (all threads of this process: torch's and CTranslate2's alike) is the steadier measure.
    """
    best, out = (float("inf"), float("inf")), None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    return best[0], best[1], out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for burble = cpu_threads for CTranslate2")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=1, help="time each row this many times (min is kept)")
    parser.add_argument("--corpora", nargs="+", default=["short", "long"], choices=["short", "long"])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    from faster_whisper import BatchedInferencePipeline

    torch.set_num_threads(args.threads)
    machine = machine_description()
    asr = burble.load_model(args.model, threads=args.threads)
    pipeline = BatchedInferencePipeline(faster_whisper_model(args.model, "float32", args.threads))
    data = {name: c for name, c in corpora().items() if name in args.corpora}
    segmenter = Segmenter("auto")
    windows = {name: {key: segmenter(audio) for key, audio, _ in c} for name, c in data.items()}
    warm = data[args.corpora[0]][:1]
    run_burble(asr, warm, windows[args.corpora[0]], 1)
    run_faster_whisper(pipeline, warm, windows[args.corpora[0]], 1)

    rows = []
    for name, corpus in data.items():
        audio_seconds = sum(len(a) for _, a, _ in corpus) / SR
        n_windows = sum(len(w) for w in windows[name].values())
        references = [text for _, _, text in corpus]
        baseline = {}
        for batch_size in args.batch_sizes:
            for system, fn in (("burble", run_burble), ("faster-whisper", run_faster_whisper)):
                model = asr if system == "burble" else pipeline
                seconds, cpu, texts = timed(lambda: fn(model, corpus, windows[name], batch_size), args.repeats)
                if system == "faster-whisper":
                    baseline[batch_size] = (audio_seconds / seconds, audio_seconds / cpu)
                rows.append([name, f"{len(corpus)} files / {n_windows} windows", system, batch_size,
                             f"{100 * corpus_wer(zip(references, texts)):.2f}%", f"{seconds:.1f}", f"{cpu:.1f}",
                             f"{audio_seconds / seconds:.2f}", f"{audio_seconds / cpu:.2f}"])
                print(rows[-1], file=sys.stderr, flush=True)
            for row in rows[-2:]:
                row += [f"{float(row[7]) / baseline[batch_size][0]:.2f}", f"{float(row[8]) / baseline[batch_size][1]:.2f}"]
        # Not an identical-settings row: burble's default batched decoding keeps timestamps, so a
        # window whose text stops early continues in a new window instead of losing the rest.
        batch_size = max(args.batch_sizes)
        stamped = replace(OPTIONS, without_timestamps=False)
        seconds, cpu, texts = timed(lambda: run_burble(asr, corpus, windows[name], batch_size, stamped), args.repeats)
        rows.append([name, f"{len(corpus)} files / {n_windows} windows", "burble, timestamps + continuation", batch_size,
                     f"{100 * corpus_wer(zip(references, texts)):.2f}%", f"{seconds:.1f}", f"{cpu:.1f}",
                     f"{audio_seconds / seconds:.2f}", f"{audio_seconds / cpu:.2f}",
                     f"{audio_seconds / seconds / baseline[batch_size][0]:.2f}", f"{audio_seconds / cpu / baseline[batch_size][1]:.2f}"])
        print(rows[-1], file=sys.stderr, flush=True)
    table = markdown_table(["corpus", "input", "system", "batch", "WER", "wall s", "CPU s", "audio s / wall s",
                            "audio s / CPU s", "wall speed vs fw", "CPU speed vs fw"], rows)
    notes = (
        f"\n\nSettings (both): {args.model} fp32, greedy, temperature 0, no timestamps, no previous-text prompt, "
        f"{args.threads} thread(s), identical windows. faster-whisper's `BatchedInferencePipeline` batches the windows "
        "of one audio, so on the short corpus its batch holds one window whatever the batch size; burble batches "
        "windows across files. The last row of each corpus is not an identical-settings comparison: burble with "
        "timestamps, where a window whose text stops before its end continues in a new window (as long-form decoding "
        "seeks), which recovers the speech that text-only windows drop at their ends."
    )
    append_section(f"Batched offline transcription vs faster-whisper BatchedInferencePipeline ({args.threads} thread(s))",
                   table + notes, machine=machine, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
