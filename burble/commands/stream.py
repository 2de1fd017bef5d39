"""``burble stream FILE``: run the live pipeline over a file (real-time paced, or ``--fast``)."""

from __future__ import annotations

import argparse
import sys

from burble.commands.common import (
    add_device_argument,
    add_recognizer_arguments,
    add_threads_argument,
    recognizer_choice_from_args,
    streaming_overrides,
)


def add_streaming_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``burble stream`` and ``burble listen``."""
    parser.add_argument("--model", default="tiny.en", help="tiny.en, base, or a checkpoint path")
    parser.add_argument("--chunk", type=float, default=1.0, help="seconds of speech per re-decode")
    parser.add_argument(
        "--no-speculative", dest="speculative", action="store_false",
        help="re-decode without the previous hypothesis as a lossless speculative draft (same text, more decoder passes)",
    )
    parser.add_argument("--no-vad", action="store_true", help="send all audio to the recognizer (no VAD gate)")
    parser.add_argument("--language", default=None, help="language code for multilingual models")
    add_recognizer_arguments(parser)
    add_device_argument(parser)
    add_threads_argument(parser, "the one recognizer, so 0 is all cores")
    parser.add_argument("--quiet", action="store_true", help="print only the captions: no statistics on stderr")
    parser.add_argument("--json", action="store_true", help="one JSON object per event and line")
    parser.add_argument("--srt", default=None, metavar="FILE", help="also write committed words as SRT")
    parser.add_argument("--beam-size", type=int, default=1, help="1: greedy re-decodes; more: beam search (slower)")
    from burble.asr.fusion.cli import add_biasing_arguments

    add_biasing_arguments(parser)


def streaming_options_from_args(args: argparse.Namespace):
    """The recognizer's :class:`~burble.streaming.recognizer.StreamingOptions` of the shared flags."""
    from burble.asr.fusion.cli import biasing_from_args
    from burble.streaming.recognizer import StreamingOptions

    biasing = biasing_from_args(args)
    return StreamingOptions(
        speculative=args.speculative,
        language=args.language,
        beam_size=args.beam_size,
        biasing=biasing if biasing.enabled else None,
        **streaming_overrides(args),
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stream",
        help="run the streaming pipeline over an audio file",
        description="Stream a file through VAD -> streaming Whisper -> events, paced in real time "
        "(like a microphone) or as fast as the machine goes (--fast). Prints events with their times.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("file", help="audio file")
    parser.add_argument("--fast", action="store_true", help="as fast as possible instead of real time")
    add_streaming_arguments(parser)


def build_sinks(args: argparse.Namespace, *, live_terminal: bool) -> list:
    from burble.streaming.sinks import EventLogSink, JsonLinesSink, SrtSink, TerminalSink

    sinks: list = [JsonLinesSink(sys.stdout) if args.json else (TerminalSink() if live_terminal else EventLogSink())]
    if args.srt:
        sinks.append(SrtSink(args.srt))
    return sinks


def build_pipeline(args: argparse.Namespace, source, sinks):
    import burble
    from burble.cpu_threads import worker_threads
    from burble.streaming.loop import PipelineOptions, asr_pipeline

    choice = recognizer_choice_from_args(args)
    streaming = streaming_options_from_args(args)  # before the model loads: bad options fail fast
    asr = burble.load_model(args.model, device=args.device, dtype=args.dtype, static_decode=args.cuda_graphs, threads=worker_threads(1, args.threads))
    recognizer = choice.build(asr, streaming)
    pipeline = asr_pipeline(
        source, recognizer, sinks, vad=None if args.no_vad else _vad_options(), options=PipelineOptions(chunk_seconds=args.chunk)
    )
    return pipeline, recognizer


def _vad_options():
    from burble.audio.vad import VADOptions

    return VADOptions()


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from burble.streaming.loop import run_until_interrupted
    from burble.streaming.sources import FileSource

    if not Path(args.file).exists():
        print(f"burble stream: error: {args.file}: no such file", file=sys.stderr)
        return 1
    pipeline, recognizer = build_pipeline(args, FileSource(args.file, realtime=not args.fast), build_sinks(args, live_terminal=False))
    metrics = run_until_interrupted(pipeline)
    if args.quiet:
        return 0
    print(stats_line(args, recognizer, metrics), file=sys.stderr)
    return 0


def stats_line(args: argparse.Namespace, recognizer, metrics) -> str:
    """``burble stream``'s closing line on stderr: throughput, the encoder and where its time went."""
    stats = recognizer.stats
    encoder = args.encoder
    if hasattr(stats, "encoder_seconds"):  # CacheAwareStats: the encoder's own time, steps vs padding tails
        encoder += f" (encoder {stats.encoder_seconds:.1f}s, tail {stats.tail_seconds:.1f}s, trims {stats.trim_seconds:.1f}s)"
    return (
        f"# audio {metrics.audio_seconds:.1f}s, RTF {metrics.rtf:.2f}, encoder {encoder}, decodes {stats.decodes}, "
        f"decoder passes {stats.decoding.target_passes}, mean acceptance {stats.decoding.mean_acceptance_length:.2f}, "
        f"max lag {metrics.max_lag_seconds:.1f}s, dropped {metrics.dropped_seconds:.1f}s"
    )
