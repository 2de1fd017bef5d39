"""Streaming Whisper over the dev recordings: WER, AWED latency, RTF and decoder passes, per chunk size,
with and without the previous-hypothesis speculative draft, side by side in one run.

Latency is measured on a *simulated real-time clock*, so the table does not depend on how loaded
the machine is beyond the compute time itself: audio arrives at real-time pace; each recognizer
call starts when ``chunk`` seconds of new audio are available or the previous call ended,
whichever is later, takes all audio available at that moment (coalescing when behind, as the event
loop does), and its events are emitted when the call returns (start + measured compute time).
AWED = emission time - acoustic end of the word (pocketsphinx forced alignment of the reference),
over words matched between hypothesis and reference. Compute RTF = recognizer seconds / audio seconds.
VAD is not used here (every sample reaches the recognizer); endpoints are only at the end of files.

    python benchmarks/streaming.py [--chunks 0.5 1 2] [--no-write]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import burble  # noqa: E402
from burble.audio import SAMPLE_RATE  # noqa: E402
from burble.audio.io import load_audio  # noqa: E402
from burble.metrics.alignment import force_align  # noqa: E402
from burble.metrics.latency import EmittedWord, LatencySummary, match_emitted_words  # noqa: E402
from burble.metrics.wer import corpus_wer  # noqa: E402
from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer  # noqa: E402
from burble.testing import dev_audio_items, untranscribed_items  # noqa: E402
from common import append_section, machine_description, markdown_table  # noqa: E402


def simulate(asr, audio: np.ndarray, chunk: float, speculative: bool):
    """Run one stream on the simulated clock; return (final events with emission times, stats, compute s)."""
    recognizer = WhisperStreamingRecognizer(asr, StreamingOptions(speculative=speculative))
    duration = len(audio) / SAMPLE_RATE
    clock, position, compute = 0.0, 0, 0.0
    emitted = []
    while position < len(audio):
        ready_at = min(duration, position / SAMPLE_RATE + chunk)
        clock = max(clock, ready_at)
        end = min(len(audio), int(clock * SAMPLE_RATE))
        start = time.perf_counter()
        events = recognizer.accept(audio[position:end], position)
        spent = time.perf_counter() - start
        compute += spent
        clock += spent
        emitted += [(e, clock) for e in events]
        position = end
    start = time.perf_counter()
    events = recognizer.flush()
    spent = time.perf_counter() - start
    compute += spent
    clock = max(clock, duration) + spent
    emitted += [(e, clock) for e in events]
    return emitted, recognizer.stats, compute


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--chunks", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    machine = machine_description()
    asr = burble.load_model(args.model)
    items = dev_audio_items()
    audio = {item.id: load_audio(str(item.audio_path)) for item in items}
    references = {item.id: force_align(audio[item.id], item.text) for item in items}
    long_item = untranscribed_items()[0]
    long_audio = load_audio(str(long_item.audio_path))
    simulate(asr, audio["jfk_inaugural_ask_not"], 1.0, True)  # warm-up
    rows = []
    for chunk in args.chunks:
        for speculative in (False, True):
            pairs, delays, reference_words = [], [], 0
            compute = audio_seconds = 0.0
            decodes = passes = generated = drafted = accepted = rounds = 0
            for item in items:
                emitted, stats, seconds = simulate(asr, audio[item.id], chunk, speculative)
                finals = [(e, t) for e, t in emitted if e.type == "final"]
                words = [EmittedWord(w.word, t) for e, t in finals for w in e.words]
                pairs.append((item.text, "".join(e.text for e, _ in finals)))
                delays += match_emitted_words(words, references[item.id])
                reference_words += len(references[item.id])
                compute += seconds
                audio_seconds += item.duration_s
                decodes += stats.decodes
                passes += stats.decoding.target_passes
                generated += stats.decoding.generated
                rounds += stats.decoding.draft_rounds
                accepted += stats.decoding.accepted
            latency = LatencySummary.from_delays((d.delay for d in delays), reference_words)
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            _, long_stats, long_compute = simulate(asr, long_audio, chunk, speculative)
            rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            rows.append([
                f"{chunk:g}", "previous hypothesis" if speculative else "off (plain LocalAgreement-2)",
                f"{100 * corpus_wer(pairs):.1f}%", f"{latency.median:.2f}", f"{latency.p90:.2f}",
                f"{compute / audio_seconds:.2f}", f"{long_compute / long_item.duration_s:.2f}",
                decodes, passes, f"{passes / max(decodes, 1):.1f}",
                f"{1 + accepted / rounds:.2f}" if rounds else "-", f"{rss_after / 1024:.0f} MB",
            ])
            print(rows[-1], file=sys.stderr)
    offline = corpus_wer([(item.text, asr.transcribe(audio[item.id], beam_size=1).text) for item in items])
    table = markdown_table(
        ["chunk s", "speculative draft", "WER", "AWED median s", "AWED p90 s", "compute RTF (dev)",
         "compute RTF (126 s file)", "decodes", "decoder passes", "passes / decode", "mean accept len", "peak RSS"],
        rows,
    )
    body = (
        f"{args.model}, {len(items)} dev clips ({sum(i.duration_s for i in items):.0f} s) + the untranscribed "
        f"{long_item.duration_s:.0f} s recording for RTF/memory. Offline greedy WER on the same clips: "
        f"{100 * offline:.1f}%. Simulated real-time clock (see the script's docstring).\n\n" + table
    )
    append_section(f"Streaming Whisper ({args.model}): chunk size x speculative re-decoding", body, machine=machine, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
