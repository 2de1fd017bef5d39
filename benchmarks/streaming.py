"""Streaming Whisper side by side (issue 13): {re-encode, cache-aware} encoder x {LocalAgreement-2,
AlignAtt} commit policy x chunk size x cache-aware lookahead, over the dev recordings, in one run.

Every recognizer is built by ``RecognizerChoice(encoder, lookahead_seconds).build(asr,
StreamingOptions(policy, alignatt_frames))``; the previous-hypothesis speculative draft is on (the
default). Streams run on a *simulated real-time clock* through the pipeline's own stages, so the
table does not depend on how loaded the machine is beyond the compute time itself: audio arrives
at real-time pace in the event loop's 0.1 s ticks; each tick's audio goes through ``VADStage``
(speech only, with its absolute start sample, and ``Endpoint``s at pauses; ``--no-vad``: all audio,
endpoints only at the end) and ``RecognizerStage``, which calls ``accept`` once ``chunk`` seconds of
speech are pending and ``endpoint`` at each endpoint. A tick starts when its audio has arrived or
the previous one returned, whichever is later, taking all audio available then (coalescing when
behind, as the event loop does); its events are emitted when it returns (start + measured compute).

Columns (short clips pooled; the long files in a second table, at ``--long-chunks`` only):

* **WER**: committed (final) text vs the references; **x offline**: that / offline greedy WER
  (``asr.transcribe(audio, beam_size=1)`` over the same recordings).
* **AWED median / p90 s**: emission time - acoustic end of the word (pocketsphinx forced alignment
  of the reference), over words matched exactly between committed text and reference.
* **EOU median s**: end-of-utterance latency, per utterance: emission time of the final event that
  holds the utterance's last reference word (matched, substitutions included) - that word's
  acoustic end. Utterances: each short clip; each constituent clip of the joined file; in the
  transcribed long recording, aligned words followed by >= 0.5 s of silence (and the last word; 20 utterances in the 20-prompt file).
  ``(n/N)`` when only n of N utterances had their last word matched.
* **compute RTF**: seconds inside the recognizer / audio seconds.
* **encoder ms / call**: per decoding recognizer call; cache-aware: frontend + cached encoder
  steps + padding tail + trims (``CacheAwareStats``); re-encode: the 30 s window encode (the
  recognizer's ``_encode``, timed by a wrapper on the instance).
* **decoder passes / call**: target decoder passes per decoding call.

Long files: the transcribed long dev recording(s) (80 s) and the short clips joined in manifest
order with 0.3 s of silence between them (references and alignments shifted by the clip offsets).

    python benchmarks/streaming.py [--model tiny.en] [--encoders ...] [--policies ...] [--chunks 0.5 1 2]
        [--lookaheads 0 0.5] [--alignatt-frames N] [--alignatt-min-probabilities 0 0.3] [--long-chunks 1] [--no-vad] [--decode-at-pauses auto|on|off] [--no-long] [--limit N] [--no-write]

``--limit N`` takes only the first N short clips and no long files (a quick check).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import burble  # noqa: E402
from burble.audio import SAMPLE_RATE  # noqa: E402
from burble.audio.vad import StreamingVAD, VADOptions  # noqa: E402
from burble.metrics.alignment import AlignedWord  # noqa: E402
from burble.metrics.latency import EmittedWord, LatencySummary, match_emitted_words  # noqa: E402
from burble.metrics.wer import corpus_wer  # noqa: E402
from burble.streaming.cache_aware import CacheAwareStats  # noqa: E402
from burble.streaming.events import StreamEvent  # noqa: E402
from burble.streaming.factory import ENCODERS, RecognizerChoice  # noqa: E402
from burble.streaming.recognizer import COMMIT_POLICIES, StreamingOptions, WhisperStreamingRecognizer  # noqa: E402
from burble.streaming.sources import AudioChunk  # noqa: E402
from burble.streaming.stages import RecognizerStage, VADStage  # noqa: E402
from common import append_section, machine_description, markdown_table  # noqa: E402

TICK_SECONDS = 0.1  # the event loop's PipelineOptions.tick_seconds
JOIN_PAUSE_SECONDS = 0.3  # silence between the clips of the joined long file
UTTERANCE_GAP_SECONDS = 0.5  # a pause in the alignment of a long recording that ends an utterance


@dataclass(frozen=True)
class Config:
    """One grid point (``lookahead`` is ``None`` for re-encode, which has none)."""

    encoder: str
    policy: str
    chunk: float
    lookahead: Optional[float]
    min_probability: Optional[float] = None  # AlignAtt's alignatt_min_probability (None: LocalAgreement)

    def cells(self) -> list[str]:
        return [self.encoder, self.policy, f"{self.chunk:g}", "-" if self.lookahead is None else f"{self.lookahead:g}",
                "-" if self.min_probability is None else f"{self.min_probability:g}"]


@dataclass
class Recording:
    """Audio to stream with its reference, forced alignment and the reference indices ending utterances."""

    id: str
    audio: np.ndarray
    text: str
    reference: list[AlignedWord]
    utterance_ends: list[int]

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass
class Run:
    """One recording streamed under one config."""

    finals: list[tuple[StreamEvent, float]]  # final events with their emission times
    compute: float
    calls: int = 0
    encoder_seconds: float = 0.0
    passes: int = 0


@dataclass
class Summary:
    wer: float
    awed: LatencySummary
    eou: list[float] = field(default_factory=list)
    utterances: int = 0
    rtf: float = math.nan
    encoder_ms: float = math.nan
    passes: float = math.nan


def grid(args: argparse.Namespace) -> list[Config]:
    """The configs of the requested grid; lookahead varies for cache-aware only."""
    configs = []
    for encoder in args.encoders:
        for policy in args.policies:
            for chunk in args.chunks:
                lookaheads = args.lookaheads if encoder == "cache-aware" else [None]
                floors = args.alignatt_min_probabilities if policy == "alignatt" else [None]
                configs += [Config(encoder, policy, chunk, lookahead, floor) for lookahead in lookaheads for floor in floors]
    return configs


def build(asr, config: Config, alignatt_frames: int) -> WhisperStreamingRecognizer:
    choice = RecognizerChoice(encoder=config.encoder, lookahead_seconds=config.lookahead or 0.0)
    floor = {} if config.min_probability is None else {"alignatt_min_probability": config.min_probability}
    return choice.build(asr, StreamingOptions(policy=config.policy, alignatt_frames=alignatt_frames, **floor))


def time_encode(recognizer: WhisperStreamingRecognizer) -> list[float]:
    """Wrap this instance's ``_encode`` to accumulate its seconds; return the accumulator ``[s]``."""
    spent = [0.0]
    encode: Callable = recognizer._encode

    @functools.wraps(encode)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return encode(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    recognizer._encode = timed  # type: ignore[method-assign]
    return spent


DECODE_AT_PAUSES: Optional[bool] = None  # --decode-at-pauses (None: the recognizer decides)


async def simulate(recognizer, audio: np.ndarray, chunk: float, vad: Optional[StreamingVAD]) -> Run:
    """Stream ``audio`` through [VADStage ->] RecognizerStage on the simulated clock (see the docstring)."""
    stages = ([VADStage(vad)] if vad is not None else []) + [RecognizerStage(recognizer, chunk_seconds=chunk, decode_at_pauses=DECODE_AT_PAUSES)]
    tick, clock, position = int(TICK_SECONDS * SAMPLE_RATE), 0.0, 0
    finals: list[tuple[StreamEvent, float]] = []

    async def step(items: list, flush: bool = False) -> None:
        nonlocal clock
        started = clock - time.perf_counter()
        for stage in stages:  # as the loop's _run_stages / _flush_stages; only the last stage makes events
            calls = [stage.process(items)] + ([stage.flush()] if flush else [])
            items = []
            for call in calls:
                out = await call
                clock = started + time.perf_counter()
                if stage is stages[-1]:
                    finals.extend((e, clock) for e in out if isinstance(e, StreamEvent) and e.type == "final")
                items += out

    try:
        while position < len(audio):
            clock = max(clock, min(len(audio), position + tick) / SAMPLE_RATE)
            end = min(len(audio), int(clock * SAMPLE_RATE))
            await step([AudioChunk(audio[position:end], position)])
            position = end
        clock = max(clock, len(audio) / SAMPLE_RATE)
        await step([], flush=True)
    finally:
        stages[-1].close()
    return Run(finals, stages[-1].busy_seconds)


def stream(asr, config: Config, recording: Recording, args: argparse.Namespace, vad: Optional[StreamingVAD]) -> Run:
    """One recording under one config, with the recognizer's counters."""
    recognizer = build(asr, config, args.alignatt_frames)
    re_encode = time_encode(recognizer) if config.encoder == "re-encode" else None
    run = asyncio.run(simulate(recognizer, recording.audio, config.chunk, vad))
    stats = recognizer.stats
    run.calls, run.passes = stats.decodes, stats.decoding.target_passes
    if isinstance(stats, CacheAwareStats):
        run.encoder_seconds = stats.encoder_seconds + stats.tail_seconds + stats.trim_seconds
    elif re_encode is not None:
        run.encoder_seconds = re_encode[0]
    return run


def summarise(runs: list[Run], recordings: list[Recording]) -> Summary:
    """Pooled WER, AWED, EOU and cost over recordings (one run each, same order)."""
    pairs, delays, eou = [], [], []
    for run, rec in zip(runs, recordings):
        pairs.append((rec.text, "".join(e.text for e, _ in run.finals)))
        words = [EmittedWord(w.word, t) for e, t in run.finals for w in e.words]
        delays += [d.delay for d in match_emitted_words(words, rec.reference)]
        emitted_at = {d.ref_index: d.emitted_at for d in match_emitted_words(words, rec.reference, include_substitutions=True)}
        eou += [emitted_at[i] - rec.reference[i].end for i in rec.utterance_ends if i in emitted_at]
    calls = sum(r.calls for r in runs)
    return Summary(
        wer=corpus_wer(pairs),
        awed=LatencySummary.from_delays(delays, sum(len(r.reference) for r in recordings)),
        eou=eou,
        utterances=sum(len(r.utterance_ends) for r in recordings),
        rtf=sum(r.compute for r in runs) / sum(r.seconds for r in recordings),
        encoder_ms=1000 * sum(r.encoder_seconds for r in runs) / max(calls, 1),
        passes=sum(r.passes for r in runs) / max(calls, 1),
    )


def fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def eou_cell(s: Summary) -> str:
    median = fmt(float(np.median(s.eou))) if s.eou else "-"
    return median if len(s.eou) == s.utterances else f"{median} ({len(s.eou)}/{s.utterances})"


def row_cells(s: Summary, offline: float, cost: bool = True) -> list[str]:
    cells = [f"{100 * s.wer:.1f}%", f"{s.wer / offline:.2f}" if offline > 0 else "-",
             fmt(s.awed.median), fmt(s.awed.p90), eou_cell(s), fmt(s.rtf)]
    return cells + ([fmt(s.encoder_ms, 1), fmt(s.passes, 1)] if cost else [])


def utterance_ends_by_gaps(reference: list[AlignedWord], gap: float = UTTERANCE_GAP_SECONDS) -> list[int]:
    """Indices of aligned words followed by a pause of at least ``gap`` seconds, and the last word."""
    ends = [i for i in range(len(reference) - 1) if reference[i + 1].start - reference[i].end >= gap]
    return ends + [len(reference) - 1] if reference else []


def joined(clips: list[Recording], pause: float = JOIN_PAUSE_SECONDS) -> Recording:
    """The clips concatenated with ``pause`` s of silence between them; alignments shifted by the offsets."""
    silence = np.zeros(int(round(pause * SAMPLE_RATE)), np.float32)
    pieces, reference, ends, offset = [], [], [], 0
    for n, clip in enumerate(clips):
        shift = offset / SAMPLE_RATE
        reference += [AlignedWord(w.word, w.start + shift, w.end + shift) for w in clip.reference]
        ends.append(len(reference) - 1)
        pieces += [clip.audio] + ([silence] if n + 1 < len(clips) else [])
        offset += len(clip.audio) + (len(silence) if n + 1 < len(clips) else 0)
    text = " ".join(c.text for c in clips)
    return Recording(f"{len(clips)} clips joined, {pause:g} s pauses", np.concatenate(pieces), text, reference, ends)


def load_recordings(limit: Optional[int], long_files: bool) -> tuple[list[Recording], list[Recording]]:
    """The short clips (each one utterance) and the long files (none with ``limit`` or not ``long_files``)."""
    from burble.metrics.alignment import force_align
    from burble.testing import dev_audio_items

    def recording(item, ends: Callable[[list[AlignedWord]], list[int]]) -> Recording:
        audio = item.load()
        reference = force_align(audio, item.text)
        return Recording(item.id, audio, item.text, reference, ends(reference))

    items = dev_audio_items()
    shorts = [recording(i, lambda ref: [len(ref) - 1]) for i in items if i.subset == "short"][:limit]
    longs: list[Recording] = []
    if long_files and limit is None:
        longs = [recording(i, utterance_ends_by_gaps) for i in items if i.subset == "long"] + [joined(shorts)]
    return shorts, longs


def offline_wer(asr, recordings: list[Recording]) -> float:
    return corpus_wer([(r.text, asr.transcribe(r.audio, beam_size=1).text) for r in recordings])


def measure(asr, config: Config, recordings: list[Recording], args, vad) -> Summary | str:
    """A config over recordings: its summary, or the error's one-line description (the grid goes on)."""
    try:
        return summarise([stream(asr, config, r, args, vad) for r in recordings], recordings)
    except Exception as error:  # e.g. a policy not implemented yet: report it in the table
        traceback.print_exc()
        return f"failed: {type(error).__name__}: {str(error)[:80]}"


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, default=["re-encode", "cache-aware"])
    parser.add_argument("--policies", nargs="+", choices=COMMIT_POLICIES, default=list(COMMIT_POLICIES))
    parser.add_argument("--chunks", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--lookaheads", type=float, nargs="+", default=[0.0, 0.5, 1.0], help="cache-aware only")
    parser.add_argument("--alignatt-frames", type=int, default=StreamingOptions().alignatt_frames)
    parser.add_argument(
        "--alignatt-min-probabilities", type=float, nargs="+", default=[StreamingOptions().alignatt_min_probability],
        help="AlignAtt only: words less probable than this wait for the next decode's agreement (grid)",
    )
    parser.add_argument("--long-chunks", type=float, nargs="+", default=[1.0], help="chunk sizes run on the long files")
    parser.add_argument("--vad", action=argparse.BooleanOptionalAction, default=True, help="gate audio with the VAD")
    parser.add_argument("--vad-hangover", type=float, default=VADOptions().hangover_seconds,
                        help="VADOptions.hangover_seconds: silence after speech before a pause is declared")
    parser.add_argument(
        "--decode-at-pauses", choices=["auto", "on", "off"], default="auto",
        help="decode pending speech at VAD speech pauses (PipelineOptions.decode_at_pauses); auto: the "
        "recognizer decides (AlignAtt on, LocalAgreement off)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, help="only the first N short clips, no long files (a quick check)")
    parser.add_argument("--no-long", action="store_true", help="skip the long files")
    parser.add_argument("--no-write", action="store_true")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    machine = machine_description()
    asr = burble.load_model(args.model)
    vad = StreamingVAD(VADOptions(hangover_seconds=args.vad_hangover)) if args.vad else None  # one model; each VADStage resets it
    global DECODE_AT_PAUSES
    DECODE_AT_PAUSES = {"auto": None, "on": True, "off": False}[args.decode_at_pauses]
    shorts, longs = load_recordings(args.limit, not args.no_long)
    warm_up = Recording("warm-up", shorts[0].audio[: 5 * SAMPLE_RATE], shorts[0].text, [], [])
    for encoder in args.encoders:
        stream(asr, Config(encoder, "local-agreement", 1.0, 0.5), warm_up, args, vad)
    offline = offline_wer(asr, shorts)
    offline_long = {r.id: offline_wer(asr, [r]) for r in longs}
    rows, long_rows = [], []
    for config in grid(args):
        started = time.perf_counter()
        result = measure(asr, config, shorts, args, vad)
        rows.append(config.cells() + (row_cells(result, offline) if isinstance(result, Summary) else [result]))
        print(f"{' '.join(config.cells())}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    long_grid = grid(argparse.Namespace(**{**vars(args), "chunks": args.long_chunks})) if longs else []
    for config in long_grid:
        for rec in longs:
            result = measure(asr, config, [rec], args, vad)
            cells = row_cells(result, offline_long[rec.id], cost=False) if isinstance(result, Summary) else [result]
            long_rows.append([rec.id] + config.cells() + cells)
        print(f"long files, {' '.join(config.cells())}: done", file=sys.stderr)
    metrics = ["WER", "x offline", "AWED median s", "AWED p90 s", "EOU median s", "compute RTF"]
    setting = ["encoder", "policy", "chunk s", "lookahead s", "AlignAtt min p"]
    body = (
        f"{args.model}, {len(shorts)} short dev clips ({sum(r.seconds for r in shorts):.0f} s), offline greedy WER "
        f"{100 * offline:.1f}%; VAD {'on' if args.vad else 'off'}{f' (hangover {args.vad_hangover} s)' if args.vad and args.vad_hangover != VADOptions().hangover_seconds else ''}{'' if args.decode_at_pauses == 'auto' else f' (decoding at pauses {args.decode_at_pauses})'}; AlignAtt frames {args.alignatt_frames}; previous-"
        "hypothesis draft on. Simulated real-time clock; columns as in the script's docstring.\n\n"
        + markdown_table(setting + metrics + ["encoder ms / call", "decoder passes / call"], rows)
    )
    if long_rows:
        notes = ", ".join(f"{r.id} ({r.seconds:.0f} s, offline {100 * offline_long[r.id]:.1f}%)" for r in longs)
        body += f"\n\nLong files: {notes}.\n\n" + markdown_table(["file"] + setting + metrics, long_rows)
    title = f"Streaming Whisper ({args.model}): encoder x commit policy x chunk x lookahead"
    append_section(title, body, machine=machine, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
