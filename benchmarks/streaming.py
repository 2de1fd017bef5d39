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

    python benchmarks/streaming.py [--chunks 0.5 1 2] [--no-write] [--baseline-ref REF] [--limit N]

``--baseline-ref REF`` measures burble at git REF too (a subprocess on a temporary worktree) and
labels the rows ``before (REF)`` and ``after (working tree)``, one table from one run.
``--limit N`` takes only the first N dev clips and skips the long recording (a quick check).
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
from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer  # noqa: E402
from common import add_baseline_options, append_section, machine_description, markdown_table  # noqa: E402
from common import ROOT, measure_in_tree, short_ref, worker_argv, worktree_at, write_worker_output  # noqa: E402

try:
    from burble.audio import SAMPLE_RATE  # noqa: E402
except ImportError:  # a --baseline-ref from before burble/audio existed
    from burble.asr.frontend import SAMPLE_RATE  # noqa: E402

WARM_UP_KEY, LONG_KEY = "__warm_up__", "__long__"  # arrays of a worker that are not dev clips


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


def measure_streaming(name: str, audio: dict[str, np.ndarray], chunks: list[float]) -> list[dict]:
    """Every (chunk, draft on/off) run over the dev clips (and the long recording, if given).

    Returns JSON-able records: per clip the final events (text, words, emission time), decoding
    counters and compute seconds. Uses only the model and the recognizer, which every baseline ref
    has, so it also runs as a ``--baseline-ref`` worker.
    """
    asr = burble.load_model(name)
    clips = {key: samples for key, samples in audio.items() if key not in (WARM_UP_KEY, LONG_KEY)}
    simulate(asr, audio[WARM_UP_KEY], 1.0, True)  # warm-up
    records = []
    for chunk in chunks:
        for speculative in (False, True):
            runs = {}
            for clip_id, samples in clips.items():
                emitted, stats, seconds = simulate(asr, samples, chunk, speculative)
                finals = [[e.text, [w.word for w in e.words], t] for e, t in emitted if e.type == "final"]
                counters = [stats.decodes, stats.decoding.target_passes, stats.decoding.draft_rounds, stats.decoding.accepted]
                runs[clip_id] = {"finals": finals, "counters": counters, "compute": seconds}
            long_compute = rss = None
            if LONG_KEY in audio:
                _, _, long_compute = simulate(asr, audio[LONG_KEY], chunk, speculative)
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            records.append({"chunk": chunk, "speculative": speculative, "clips": runs, "long_compute": long_compute, "rss_mb": rss})
            print(f"{name} chunk {chunk:g} draft {speculative}: done", file=sys.stderr)
    return records


def table_rows(records: list[dict], items, references, long_seconds: float | None, label: str) -> list[list]:
    """One table row per record: WER, AWED latency, RTF, decoder passes, acceptance, memory."""
    from burble.metrics.latency import EmittedWord, LatencySummary, match_emitted_words
    from burble.metrics.wer import corpus_wer

    rows = []
    for record in records:
        pairs, delays, reference_words = [], [], 0
        compute = audio_seconds = 0.0
        decodes = passes = rounds = accepted = 0
        for item in items:
            run = record["clips"][item.id]
            words = [EmittedWord(word, t) for _, event_words, t in run["finals"] for word in event_words]
            pairs.append((item.text, "".join(text for text, _, _ in run["finals"])))
            delays += match_emitted_words(words, references[item.id])
            reference_words += len(references[item.id])
            compute += run["compute"]
            audio_seconds += item.duration_s
            decodes, passes, rounds, accepted = (a + b for a, b in zip((decodes, passes, rounds, accepted), run["counters"]))
        latency = LatencySummary.from_delays((d.delay for d in delays), reference_words)
        draft = "previous hypothesis" if record["speculative"] else "off (plain LocalAgreement-2)"
        long_rtf = f"{record['long_compute'] / long_seconds:.2f}" if record["long_compute"] is not None and long_seconds else "-"
        rows.append([
            label, f"{record['chunk']:g}", draft,
            f"{100 * corpus_wer(pairs):.1f}%", f"{latency.median:.2f}", f"{latency.p90:.2f}",
            f"{compute / audio_seconds:.2f}", long_rtf,
            decodes, passes, f"{passes / max(decodes, 1):.1f}",
            f"{1 + accepted / rounds:.2f}" if rounds else "-", f"{record['rss_mb']:.0f} MB" if record["rss_mb"] else "-",
        ])
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--chunks", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--limit", type=int, help="only the first N dev clips, no long recording (a quick check)")
    add_baseline_options(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.worker_output:  # a worker run (see measure_in_tree): the recognizer only, on the parent's audio
        write_worker_output(args.worker_output, measure_streaming(args.model, dict(np.load(args.worker_audio)), args.chunks))
        return 0
    from burble.audio.io import load_audio
    from burble.metrics.alignment import force_align
    from burble.metrics.wer import corpus_wer
    from burble.testing import dev_audio_items, untranscribed_items

    machine = machine_description()
    items = dev_audio_items()[: args.limit]
    audio = {item.id: load_audio(str(item.audio_path)) for item in items}
    references = {item.id: force_align(audio[item.id], item.text) for item in items}
    warm_up_item = next(item for item in dev_audio_items() if item.id == "jfk_inaugural_ask_not")
    arrays = {**audio, WARM_UP_KEY: load_audio(str(warm_up_item.audio_path))}
    long_item = untranscribed_items()[0]
    if args.limit is None:
        arrays[LONG_KEY] = load_audio(str(long_item.audio_path))
    long_seconds = long_item.duration_s if LONG_KEY in arrays else None
    rows = []
    if args.baseline_ref:
        # Before and after both run as worker processes of the same shape (see measure_in_tree).
        command = worker_argv(sys.argv[1:] if argv is None else argv)
        with worktree_at(args.baseline_ref) as tree:
            before = measure_in_tree(tree, __file__, command, arrays)
        rows += table_rows(before, items, references, long_seconds, f"before ({short_ref(args.baseline_ref)})")
        after = measure_in_tree(ROOT, __file__, command, arrays)
        rows += table_rows(after, items, references, long_seconds, "after (working tree)")
    else:
        rows += table_rows(measure_streaming(args.model, arrays, args.chunks), items, references, long_seconds, "working tree")
    asr = burble.load_model(args.model)
    offline = corpus_wer([(item.text, asr.transcribe(audio[item.id], beam_size=1).text) for item in items])
    table = markdown_table(
        ["burble", "chunk s", "speculative draft", "WER", "AWED median s", "AWED p90 s", "compute RTF (dev)",
         "compute RTF (126 s file)", "decodes", "decoder passes", "passes / decode", "mean accept len", "peak RSS"],
        rows,
    )
    long_note = f" + the untranscribed {long_item.duration_s:.0f} s recording for RTF/memory" if long_seconds else ""
    body = (
        f"{args.model}, {len(items)} dev clips ({sum(i.duration_s for i in items):.0f} s){long_note}. Offline greedy WER on "
        f"the same clips: {100 * offline:.1f}%. Simulated real-time clock (see the script's docstring).\n\n" + table
    )
    append_section(f"Streaming Whisper ({args.model}): chunk size x speculative re-decoding", body, machine=machine, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
