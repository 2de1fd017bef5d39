"""``burble listen``: live microphone captions in the terminal."""

from __future__ import annotations

import argparse
import sys

from burble.commands.stream import add_streaming_arguments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "listen",
        help="live captions from a microphone",
        description="Caption a microphone live: uncommitted words are dimmed, committed words normal. "
        "Ctrl-C flushes the last words and exits.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    parser.add_argument("--device", default=None, help="input device index or name (default: system default)")
    add_streaming_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from burble.streaming.sources import MicrophoneSource

    if args.list_devices:
        print(MicrophoneSource.format_devices())
        return 0
    from burble.commands.stream import build_pipeline, build_sinks
    from burble.streaming.loop import run_until_interrupted

    try:
        source = MicrophoneSource(device=args.device)
    except Exception as error:  # PortAudio missing, no such device, ...
        print(f"burble listen: error: {error}", file=sys.stderr)
        return 1
    pipeline, _ = build_pipeline(args, source, build_sinks(args, live_terminal=True))
    metrics = run_until_interrupted(pipeline)
    print(f"\n# {metrics.audio_seconds:.1f}s captured, RTF {metrics.rtf:.2f}, dropped {metrics.dropped_seconds:.1f}s", file=sys.stderr)
    return 0
