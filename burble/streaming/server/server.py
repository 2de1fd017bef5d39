"""``AsrServer``: the WebSocket streaming ASR service behind ``burble serve``.

One process, one asyncio event loop, one loaded model. Each connection is a ``Session`` with its
own pipeline and recognizer; recognizer calls run on the server's compute engine
(``burble.streaming.engine``: ``compute_slots`` worker threads serving the sessions' lanes
round-robin). Sessions get a ``SessionContext`` (options, metrics, engine, factory, an unregister
callback), never the server itself.

Routes (all on one port; plain HTTP is answered from the handshake hook ``process_request``):

- ``/ws``: the burble protocol (docs/protocol.md);
- ``/vosk``: a Vosk-server compatible endpoint (``{"config": ...}``, PCM, ``{"eof": 1}``);
- ``/tts``: text to speech (``{"type": "speak", "text": ...}`` in, audio frames out; ``tts_session``);
- ``/`` (WebSocket): the dialect of ``ServerOptions.dialect`` (``dialects.websocket_routes``);
- ``GET /healthz``: ``{"status": "ok", ...}`` (no token needed: for load balancers);
- ``GET /metrics`` (Prometheus text) and ``GET /metrics.json``: counters (token needed if set);
- ``GET /``: the browser captioning page (static files).

Security: a token (if configured) is checked on every route but ``/healthz`` and the static
page (which holds no data; the page passes the token it was opened with to ``/ws``); browser
``Origin``s outside the allow-list are refused; limits on message size, session length, idle
time and concurrent sessions apply to every session.

Shutdown (``shutdown()``, SIGTERM/SIGINT in ``serve_forever``): stop accepting connections,
let every session flush its finals, close them with 1001 (going away).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http
import itertools
import logging
import secrets
import signal
import time
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from burble.heap import release_free_memory
from burble.streaming.server.context import SessionContext
from burble.streaming.server.dialects import websocket_routes
from burble.streaming.server.http import json_response, static_response, text_response
from burble.streaming.server.metrics import ServerMetrics, prometheus_text
from burble.streaming.server.options import ServerOptions
from burble.streaming.server.protocol import ProtocolError, dumps
from burble.streaming.engine import ComputeEngine
from burble.streaming.server.recognizers import RecognizerFactory, default_compute_slots
from burble.streaming.server.security import origin_allowed, presented_token, token_matches
from burble.streaming.server.session import Session

logger = logging.getLogger("burble.server")


class AsrServer:
    """The streaming ASR service.

    Args:
      factory: makes each session's recognizer (e.g. ``WhisperRecognizerFactory``).
      options: listening, limits and pipeline settings.

    Example::

        factory = WhisperRecognizerFactory(burble.load_model("tiny.en"))
        server = AsrServer(factory, ServerOptions(port=8765))
        await server.start()
        await server.serve_forever()   # until SIGTERM / SIGINT
    """

    def __init__(self, factory: RecognizerFactory, options: ServerOptions = ServerOptions(), *,
                 voice: Optional[Callable[[], Any]] = None) -> None:
        self.factory = factory
        self.options = options
        self.routes = websocket_routes(options.dialect)
        # Idle moments hand the heaps' free pages back (burble/heap.py): a long-running server's RSS
        # then follows what its sessions hold, not the most its decodes ever allocated.
        self.engine = ComputeEngine(
            options.compute_slots or default_compute_slots(), name="burble-compute", on_idle=release_free_memory,
        )
        self.metrics = ServerMetrics()
        context = SessionContext(options, self.metrics, self.engine, factory, self._unregister)
        # ``voice``: what ``/tts`` speaks with (default: ``burble.tts.load()``, on first use).
        self.context = context if voice is None else dataclasses.replace(context, voice=voice)
        self.sessions: dict[str, Session] = {}
        self._ids = itertools.count(1)
        self._prefix = secrets.token_hex(3)
        self._server: Optional[Server] = None
        self._port: Optional[int] = None
        self._closing = False
        self._stopped: Optional[asyncio.Event] = None

    # ---------------------------------------------------------------------------- lifecycle
    @property
    def port(self) -> int:
        """The bound port (useful with ``port=0``)."""
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """``ws://host:port/ws``: the burble protocol, whatever the root speaks."""
        return f"ws://{self._netloc}/ws"

    @property
    def root_url(self) -> str:
        """``ws://host:port/``: the root, which speaks ``options.dialect``."""
        return f"ws://{self._netloc}/"

    @property
    def page_url(self) -> str:
        """``http://host:port/``: the browser page."""
        return f"http://{self._netloc}/"

    @property
    def _netloc(self) -> str:
        host = self.options.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> None:
        """Warm the recognizer up, then bind and start accepting connections."""
        opts = self.options
        if opts.token is None and opts.host not in ("127.0.0.1", "localhost", "::1"):
            logger.warning(
                "serving on %s without a token: anyone who can reach the port can use the model", opts.host,
                extra={"event": "no_token"},
            )  # fmt: skip
        self._stopped = asyncio.Event()
        # The first decode pays for one-off set-up (kernel selection, allocator growth, the DTW
        # JIT); pay it now, before any client waits on it and before we say we are listening.
        started = time.monotonic()
        await asyncio.to_thread(self.factory.warm_up)
        logger.info(
            "recognizer warmed up in %.1f s", time.monotonic() - started,
            extra={"event": "warmed_up", "seconds": round(time.monotonic() - started, 3)},
        )  # fmt: skip
        self._server = await serve(
            self._handle,
            opts.host,
            opts.port,
            process_request=self._process_request,
            compression=None,  # PCM does not deflate; compression would only cost CPU per frame
            max_size=opts.max_message_bytes,
            close_timeout=min(opts.send_timeout_seconds, 10.0),
            server_header="burble",
        )
        self._port = self._server.sockets[0].getsockname()[1]
        logger.info(
            "listening on %s (model %s, %s at /, max %d sessions, %d compute slots)", self.url, self.factory.model_name,
            opts.dialect, opts.max_sessions, self.engine.workers,
            extra={"event": "listening", "url": self.url, "root_url": self.root_url, "page": self.page_url, "dialect": opts.dialect},
        )  # fmt: skip

    async def serve_forever(self) -> None:
        """Serve until ``shutdown()`` or SIGTERM/SIGINT (graceful: finals are flushed)."""
        if self._server is None:
            await self.start()
        assert self._stopped is not None
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, lambda s=sig: self._on_signal(s))
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        try:
            await self._stopped.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        logger.info("received %s: shutting down", sig.name, extra={"event": "signal", "signal": sig.name})
        asyncio.ensure_future(self.shutdown())

    async def shutdown(self) -> None:
        """Stop accepting, flush every session's finals, close them with 1001. Idempotent."""
        if self._closing:
            assert self._stopped is not None
            await self._stopped.wait()
            return
        self._closing = True
        assert self._server is not None and self._stopped is not None
        # Stop listening first; open connections stay up until their sessions have flushed.
        self._server.close(close_connections=False)
        sessions = list(self.sessions.values())
        for session in sessions:
            session.shutdown()
        if sessions:
            done = asyncio.gather(*(self._wait_session(s) for s in sessions))
            try:
                await asyncio.wait_for(done, self.options.shutdown_grace_seconds)
            except asyncio.TimeoutError:
                logger.warning("sessions did not finish within the grace period; closing them", extra={"event": "shutdown_timeout"})
        # Anything still open (e.g. a handshake in flight) is closed with 1001 here.
        for connection in list(self._server.connections):
            await connection.close(1001)
        try:
            await asyncio.wait_for(self._server.wait_closed(), self.options.shutdown_grace_seconds)
        except asyncio.TimeoutError:
            pass
        logger.info("server stopped", extra={"event": "stopped"})
        self._stopped.set()

    async def _wait_session(self, session: Session) -> None:
        while session.id in self.sessions:
            await asyncio.sleep(0.02)

    # ---------------------------------------------------------------------------- handshake
    def _process_request(self, connection: ServerConnection, request: Request) -> Optional[Response]:
        path = urlsplit(request.path).path
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if not upgrade:
            return self._http(path, request)
        if path not in self.routes:
            endpoints = ", ".join(sorted(self.routes))
            return text_response(http.HTTPStatus.NOT_FOUND, f"no WebSocket endpoint at {path[:100]} (endpoints: {endpoints})\n")
        if not token_matches(self.options.token, presented_token(request.headers, request.path)):
            self.metrics.rejected["auth"] += 1
            logger.warning("rejected: missing or wrong token", extra={"event": "rejected", "reason": "auth"})
            return text_response(
                http.HTTPStatus.UNAUTHORIZED, "missing or wrong token\n", {"WWW-Authenticate": 'Bearer realm="burble"'}
            )
        if not origin_allowed(request.headers.get("Origin"), request.headers.get("Host"), self.options.allowed_origins):
            self.metrics.rejected["origin"] += 1
            logger.warning("rejected: origin not allowed", extra={"event": "rejected", "reason": "origin"})
            return text_response(http.HTTPStatus.FORBIDDEN, "origin not allowed\n")
        return None

    def _http(self, path: str, request: Request) -> Response:
        if path == "/healthz":
            status = "shutting_down" if self._closing else "ok"
            code = http.HTTPStatus.SERVICE_UNAVAILABLE if self._closing else http.HTTPStatus.OK
            return json_response(code, {"status": status, "model": self.factory.model_name, "sessions": len(self.sessions)})
        if path in ("/metrics", "/metrics.json"):
            if not token_matches(self.options.token, presented_token(request.headers, request.path)):
                return text_response(http.HTTPStatus.UNAUTHORIZED, "missing or wrong token\n", {"WWW-Authenticate": 'Bearer realm="burble"'})
            snapshot = self.snapshot()
            if path == "/metrics.json":
                return json_response(http.HTTPStatus.OK, snapshot)
            return text_response(http.HTTPStatus.OK, prometheus_text(snapshot))
        if self.options.static:
            page = static_response(path)
            if page is not None:
                return page
        return text_response(http.HTTPStatus.NOT_FOUND, "not found\n")

    def snapshot(self) -> dict:
        """Current metrics (what ``/metrics.json`` returns)."""
        return self.metrics.snapshot(
            {session_id: s.metrics for session_id, s in self.sessions.items()},
            sessions_active=len(self.sessions),
            compute_running=self.engine.running,
            compute_waiting=self.engine.waiting,
            compute_batches=dict(self.engine.batch_sizes),
        )

    # ----------------------------------------------------------------------------- sessions
    async def _handle(self, connection: ServerConnection) -> None:
        path = urlsplit(connection.request.path).path if connection.request else "/ws"
        session_id = f"{self._prefix}-{next(self._ids)}"
        refusal = self._refusal()
        if refusal is not None:
            reason, error = refusal
            self.metrics.rejected[reason] += 1
            logger.warning("rejected: %s", error.message, extra={"event": "rejected", "reason": reason})
            try:
                await connection.send(dumps(error.to_message()))
                await connection.close(error.close_code)
            except Exception:
                pass
            return
        # _process_request let only routed paths through the handshake.
        session = self.routes[path](self.context, connection, session_id)
        self.sessions[session_id] = session
        await session.run()

    def lag_seconds(self) -> float:
        """The largest current lag (captured, not yet recognised audio) among open sessions."""
        return max((s.metrics.lag_seconds for s in self.sessions.values()), default=0.0)

    def _refusal(self) -> Optional[tuple[str, ProtocolError]]:
        """Why a new connection is refused now (the ``rejected`` reason and the error), or ``None``."""
        if self._closing:
            return "shutting_down", ProtocolError("shutting_down", "the server is shutting down")
        if len(self.sessions) >= self.options.max_sessions:
            return "busy", ProtocolError(
                "server_busy", f"the server is at its limit of {self.options.max_sessions} sessions; try again later",
                retry_after=5.0,
            )
        limit, lag = self.options.admit_max_lag_seconds, self.lag_seconds()
        if limit is not None and lag >= limit:
            # Until the lagging stream has caught up: a fresh stream now would slow every one down.
            return "lagging", ProtocolError(
                "server_busy", f"recognition lags {lag:.1f} s behind its audio (limit {limit:g} s); try again later",
                retry_after=max(1.0, lag),
            )
        return None

    def _unregister(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
