"""``burble serve``: the WebSocket streaming ASR service with its browser captioning page."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from burble.commands.common import (
    add_device_argument,
    add_recognizer_arguments,
    add_threads_argument,
    recognizer_choice_from_args,
    streaming_overrides,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve streaming ASR over WebSocket (with a browser page)",
        description=(
            "Serve streaming speech recognition over WebSocket (protocol: docs/protocol.md) at "
            "ws://HOST:PORT/ws, a Vosk-compatible endpoint at /vosk, text to speech at /tts (text in, "
            "audio frames out), a captioning page at /, and /healthz and /metrics. WebSocket clients of the root URL ws://HOST:PORT/ speak --dialect: "
            "burble's protocol, or vosk to stand in for a Vosk server with its clients unchanged. The "
            "model is warmed up before the server listens. SIGTERM or Ctrl-C stops it gracefully: "
            "every session gets its final results before the server closes it."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (0: any free port)")
    parser.add_argument("--model", default="tiny.en", help="tiny.en, base, or a checkpoint path")
    parser.add_argument("--token-file", default=None, help="file holding the bearer token clients must send")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN", help="browser origin allowed besides this server's own page (repeatable; * for any)")
    parser.add_argument("--max-sessions", type=int, default=8, help="concurrent sessions (more are refused with code 1013)")
    parser.add_argument(
        "--admit-max-lag", type=float, default=2.0, metavar="SECONDS",
        help="refuse new sessions (code 1013, with a retry_after hint) while an open session's recognition lags this far behind its audio; 0: never",
    )
    parser.add_argument("--max-message-bytes", type=int, default=1 << 19, help="largest WebSocket message")
    parser.add_argument("--max-session-seconds", type=float, default=3600.0, help="longest session (wall time)")
    parser.add_argument("--idle-timeout", type=float, default=30.0, help="end sessions silent for this long (s)")
    parser.add_argument("--compute-slots", type=int, default=None, help="recognizer calls running at once, across all sessions (unset: one per CPU core)")
    add_threads_argument(parser, "a compute slot, so 0 is CPU cores // --compute-slots")
    parser.add_argument("--dialect", choices=("burble", "vosk"), default="burble", help="protocol of WebSocket clients of the root URL / (/ws and /vosk stay as they are)")
    parser.add_argument("--chunk", type=float, default=1.0, help="default seconds of speech per recognizer step")
    parser.add_argument("--no-vad", action="store_true", help="send all audio to the recognizer (no endpoints)")
    parser.add_argument("--no-page", action="store_true", help="do not serve the browser page at /")
    add_recognizer_arguments(parser)
    add_device_argument(parser)
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="json: stderr carries only JSON objects, one per line (library warnings too)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    from burble.asr.fusion.cli import add_biasing_arguments

    # Server-wide biasing; a session's own ``hotwords`` (start message) are boosted on top.
    add_biasing_arguments(parser)


def options_from_args(args: argparse.Namespace):
    from burble.streaming.loop import PipelineOptions
    from burble.streaming.server import ServerOptions
    from burble.streaming.server.security import load_token
    from burble.audio.vad import VADOptions

    token = load_token(args.token_file) if args.token_file else None
    return ServerOptions(
        host=args.host,
        port=args.port,
        token=token,
        allowed_origins=tuple(args.allow_origin),
        max_sessions=args.max_sessions,
        admit_max_lag_seconds=args.admit_max_lag if args.admit_max_lag > 0 else None,
        max_message_bytes=args.max_message_bytes,
        max_session_seconds=args.max_session_seconds,
        idle_timeout_seconds=args.idle_timeout,
        compute_slots=args.compute_slots,
        pipeline=PipelineOptions(chunk_seconds=args.chunk),
        vad=None if args.no_vad else VADOptions(),
        dialect=args.dialect,
        static=not args.no_page,
    )


def run(args: argparse.Namespace) -> int:
    from burble.streaming.server.logs import configure_logging

    configure_logging(args.log_format, getattr(logging, args.log_level.upper()))
    log = logging.getLogger("burble.server")
    try:
        options = options_from_args(args)
    except (OSError, ValueError) as e:
        print(f"burble serve: {e}", file=sys.stderr)
        return 2

    from burble.asr.fusion.cli import biasing_from_args
    from burble.streaming.recognizer import StreamingOptions

    biasing = biasing_from_args(args)
    streaming = StreamingOptions(biasing=biasing if biasing.enabled else None, **streaming_overrides(args))
    choice = recognizer_choice_from_args(args)

    import burble
    from burble.cpu_threads import worker_threads
    from burble.heap import cap_primitive_cache, fix_mmap_threshold
    from burble.streaming.server import AsrServer, WhisperRecognizerFactory
    from burble.streaming.server.recognizers import default_compute_slots

    # Memory that stays flat (burble/heap.py): many streams' varying temporaries fragment the heap
    # otherwise, and oneDNN primitives (bfloat16 matmuls, the encoder's convolutions) pile up per
    # shape in oneDNN's and PyTorch's ideep caches.
    fix_mmap_threshold()
    cap_primitive_cache()

    # Each compute slot runs one decode at a time: the slots are the workers that share the cores.
    threads = worker_threads(options.compute_slots or default_compute_slots(), args.threads)
    log.info(
        "loading model %s", args.model,
        extra={"event": "loading_model", "model": args.model, "threads": threads, "encoder": choice.encoder, "policy": streaming.policy},
    )  # fmt: skip
    asr = burble.load_model(args.model, device=args.device, dtype=args.dtype, static_decode=args.cuda_graphs, threads=threads)
    factory = WhisperRecognizerFactory(asr, streaming, model_name=args.model, choice=choice)

    async def main() -> None:
        # Sessions' recognizer calls run on the compute engine's workers (streaming/engine.py),
        # round-robin across sessions, so a session with a backlog delays no other session.
        server = AsrServer(factory, options)
        try:
            await server.start()
        except OSError as e:
            log.error("cannot listen on %s:%d: %s", options.host, options.port, e, extra={"event": "bind_failed"})
            raise SystemExit(1) from None
        if args.log_format == "text":  # json: the "listening" record carries both URLs
            print(
                f"burble: serving {args.model} at {server.url} ({options.dialect} protocol at {server.root_url}; "
                f"page: {server.page_url})", file=sys.stderr, flush=True,
            )  # fmt: skip
        await server.serve_forever()

    asyncio.run(main())
    return 0
