"""``burble listen``: live microphone captions in the terminal."""

from __future__ import annotations

import argparse
import sys

from burble.commands.stream import add_streaming_arguments

# What a newcomer without the PortAudio library (sounddevice's C half) needs to do, in one line.
PORTAUDIO_MISSING = (
    "burble listen: error: the PortAudio library is not installed; install it and run again "
    "(Debian/Ubuntu: sudo apt-get install libportaudio2; Fedora: sudo dnf install portaudio; macOS: brew install portaudio)"
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "listen",
        help="live captions from a microphone",
        description="Caption a microphone live: uncommitted words are dimmed, committed words normal. "
        "Ctrl-C flushes the last words and exits.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    parser.add_argument(
        "--input-device", default=None, metavar="MIC",
        help="microphone: an index or (part of) a name from --list-devices (default: the system's default input)",
    )
    add_streaming_arguments(parser)


def portaudio_problem() -> str | None:
    """The one line to print when the microphone cannot work on this machine, else ``None``.

    Checked before anything else (the model is not loaded for nothing), and by importing
    sounddevice directly: it raises ``OSError`` when the PortAudio library is missing.
    """
    try:
        import sounddevice  # noqa: F401
    except OSError:
        return PORTAUDIO_MISSING
    except ImportError:
        return "burble listen: error: microphone input needs the sounddevice package: pip install sounddevice"
    return None


def run(args: argparse.Namespace) -> int:
    problem = portaudio_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    from burble.streaming.sources import MicrophoneSource

    try:
        if args.list_devices:
            print(MicrophoneSource.format_devices())
            return 0
        source = MicrophoneSource(device=args.input_device)
    except Exception as error:  # no such device, the sound server refused, ...: one line, not a traceback
        print(f"burble listen: error: {error}", file=sys.stderr)
        return 1
    from burble.commands.stream import build_pipeline, build_sinks
    from burble.streaming.loop import run_until_interrupted

    pipeline, _ = build_pipeline(args, source, build_sinks(args, live_terminal=True))
    metrics = run_until_interrupted(pipeline)
    if not args.quiet:
        print(f"\n# {metrics.audio_seconds:.1f}s captured, RTF {metrics.rtf:.2f}, dropped {metrics.dropped_seconds:.1f}s", file=sys.stderr)
    return 0
