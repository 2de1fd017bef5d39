"""``burble client FILE --url ws://HOST:PORT/``: stream a recording to a ``burble serve`` server."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "client",
        help="stream an audio file to a burble server and print the results",
        description=(
            "Stream FILE to a burble streaming ASR server, in real time (like a live microphone) or "
            "as fast as the server takes it, and print the events: live captions on a terminal, one "
            "line per event into a pipe (as 'burble stream FILE' prints them), or with --json the "
            "same JSON lines as 'burble stream --json'. Exit status: 0 done, 1 server error or "
            "unreachable (one line on stderr), 2 bad arguments (a bad URL, an unreadable FILE)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="audio file (wav, flac, ogg, ...)")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/", help="the server: its base URL ws://HOST:PORT/ (or http://, as printed for the page) or its endpoint .../ws")
    parser.add_argument("--token-file", default=None, help="file holding the bearer token")
    parser.add_argument("--json", action="store_true", help="print events as JSON lines")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument("--realtime", dest="realtime", action="store_true", default=True, help="send at real-time pace")
    pace.add_argument("--fast", dest="realtime", action="store_false", help="send as fast as the server accepts")
    parser.add_argument("--speed", type=float, default=1.0, help="with --realtime: play this many times faster")
    parser.add_argument("--no-partials", action="store_true", help="only final and endpoint events")
    parser.add_argument("--chunk", type=float, default=None, help="recognizer step in seconds (server default)")
    parser.add_argument("--language", default=None, help="language code (multilingual models)")
    parser.add_argument("--hotword", action="append", default=[], help="word or phrase to favour (repeatable)")
    parser.add_argument("--encoding", choices=("pcm_s16le", "f32le"), default="pcm_s16le")


def run(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from websockets.exceptions import WebSocketException

    from burble.streaming.client import ClientOptions, ServerError, read_audio_file, stream_audio
    from burble.streaming.server.security import load_token
    from burble.streaming.sinks import EventLogSink, JsonLinesSink, TerminalSink

    if not Path(args.file).is_file():
        print(f"burble client: {args.file}: no such file", file=sys.stderr)
        return 2
    try:
        token = load_token(args.token_file) if args.token_file else None
        options = ClientOptions(
            url=args.url,
            token=token,
            encoding=args.encoding,
            partials=not args.no_partials,
            chunk_seconds=args.chunk,
            language=args.language,
            hotwords=tuple(args.hotword),
            realtime=args.realtime,
            speed=args.speed,
        )
    except (OSError, ValueError) as e:
        print(f"burble client: {e}", file=sys.stderr)
        return 2
    try:
        audio, rate = read_audio_file(args.file)
    except (OSError, RuntimeError) as e:  # soundfile's errors are RuntimeErrors
        print(f"burble client: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    # --json and a pipe print what `burble stream` prints; a terminal gets live captions instead.
    if args.json:
        sink = JsonLinesSink(sys.stdout)
    elif sys.stdout.isatty():
        sink = TerminalSink(sys.stdout)
    else:
        sink = EventLogSink(sys.stdout)
    try:
        asyncio.run(stream_audio(audio, rate, options, on_event=sink.write))
        return 0
    except ServerError as e:  # refused (401, 404 ...), an error message, or closed unfinished
        print(f"burble client: server error {e.code}: {e.message}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError, WebSocketException) as e:
        # Refused, unresolvable, timed out, or not a WebSocket server: no traceback, one line.
        print(f"burble client: cannot reach {options.endpoint}: {str(e) or type(e).__name__}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        sink.close()
