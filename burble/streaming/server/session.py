"""One WebSocket session: start -> audio frames -> stop, over the standard streaming pipeline.

A session runs three tasks:

- the **receiver** (this coroutine): reads client messages, validates them (``protocol``) and
  pushes audio into the session's ``NetworkSource``;
- the **pipeline** (``loop.Pipeline``: source -> ring buffer -> VAD -> recognizer -> sink), the
  same one ``burble stream`` runs; its sink queues events for
- the **sender**: writes queued messages to the socket, each write bounded by
  ``send_timeout_seconds`` so a client that stops reading cannot hold the session forever.

How a session ends decides what the client still gets (``Ending``):

- ``stop`` (or the session/idle limit, or server shutdown): the source ends, the pipeline
  drains and flushes, every final is sent, then (for limits and shutdown) an ``error`` saying
  why, then the close frame (1000 after stop, 1008 limits, 1001 shutdown);
- a protocol error: ``error`` right away, the pipeline is cancelled, close with the error's code;
- the client vanished: the pipeline is cancelled, nothing is sent.

Every path ends in ``_cleanup``, which cancels whatever still runs and unregisters the session,
so the server's session count always returns to zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Optional, Union

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from burble.streaming.events import StreamEvent
from burble.streaming.loop import Pipeline, PipelineMetrics, asr_pipeline
from burble.streaming.server.context import SessionContext
from burble.streaming.server.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    PROTOCOL_VERSION,
    ProtocolError,
    SessionConfig,
    decode_audio,
    dumps,
    message_type,
    parse_json_object,
)
from burble.streaming.server.recognizers import unsupported_options
from burble.streaming.server.source import NetworkSource
from burble.streaming.stages import Recognizer
from burble.audio.vad import StreamingVAD

logger = logging.getLogger("burble.server")

_CLOSE = object()  # sender sentinel: everything before it is sent, then the sender returns


@dataclass(frozen=True)
class Ending:
    """Why a session ends and what it still owes the client.

    Attributes:
      reason: ``stop``, ``limit``, ``shutdown``, ``error``, ``vanished``.
      flush: run the pipeline to its end and send every final first.
      close_code: the WebSocket close code (``None``: the connection is already gone).
      error: an ``error`` message to send (after the finals when flushing).
    """

    reason: str
    flush: bool
    close_code: Optional[int]
    error: Optional[ProtocolError] = None


class EventSink:
    """The pipeline's sink: hands each event to its session (called on the event loop thread)."""

    def __init__(self, session: "Session") -> None:
        self.session = session

    def write(self, event: StreamEvent) -> None:
        self.session.on_event(event)

    def close(self) -> None:
        pass


class Session:
    """The burble protocol over one connection (see the module docstring).

    Args:
      context: what the server lends the session (options, recognizer factory, compute
        engine, metrics, and the callback that unregisters it).
      connection: the accepted WebSocket.
      session_id: identifier used in ``ready`` and in the logs.
    """

    def __init__(self, context: SessionContext, connection: ServerConnection, session_id: str) -> None:
        self.context = context
        self.options = context.options
        self.connection = connection
        self.id = session_id
        self.config: Optional[SessionConfig] = None
        self.source: Optional[NetworkSource] = None
        self.pipeline: Optional[Pipeline] = None
        self.opened_at = time.monotonic()
        self.ending: Optional[Ending] = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pipeline_task: Optional[asyncio.Task] = None
        self._sender_task: Optional[asyncio.Task] = None
        self._receiver_task: Optional[asyncio.Task] = None
        self._closer: Optional[asyncio.Future] = None
        self._final_metrics: Optional[PipelineMetrics] = None  # kept when the pipeline is released

    # ------------------------------------------------------------------------------- metrics
    @property
    def metrics(self) -> PipelineMetrics:
        if self.pipeline is not None:
            return self.pipeline.metrics
        return self._final_metrics or PipelineMetrics()

    def log(self, level: int, event: str, message: str, **fields: Any) -> None:
        logger.log(level, message, extra={"event": event, "session": self.id, **fields})

    # ------------------------------------------------------------------------------- running
    async def run(self) -> None:
        """Serve the connection until it ends; never raises for client behaviour."""
        try:
            config = await self.await_start()
            if config is None:
                return
            await self.open(config)
            self._sender_task = asyncio.create_task(self._send_loop(), name=f"burble-send-{self.id}")
            self._pipeline_task = asyncio.create_task(self._run_pipeline(), name=f"burble-pipeline-{self.id}")
            ready = self.ready_message()
            if ready is not None:
                self.send(ready)
            self._receiver_task = asyncio.create_task(self._receive_loop(), name=f"burble-recv-{self.id}")
            try:
                await self._receiver_task
            except asyncio.CancelledError:
                if self.ending is None:  # not our own cancellation (shutdown/pipeline failure)
                    raise
            await self._finish()
        except ProtocolError as error:  # before the pipeline exists (bad or missing start)
            self._count_error(error)
            await self._send_now(dumps(error.to_message()))
            await self._close(error.close_code)
        except ConnectionClosed:
            pass
        except Exception:
            logger.exception("session failed", extra={"event": "session_failed", "session": self.id})
            await self._close(CLOSE_INTERNAL)
        finally:
            await self._cleanup()

    async def await_start(self) -> Optional[SessionConfig]:
        """Wait for a valid ``start`` (``None`` if the client left first)."""
        try:
            message = await asyncio.wait_for(self.connection.recv(), self.options.idle_timeout_seconds)
        except asyncio.TimeoutError:
            raise ProtocolError("idle_timeout", f"no start message within {self.options.idle_timeout_seconds:g} s") from None
        except ConnectionClosed:
            return None
        if not isinstance(message, str):
            raise ProtocolError("not_started", 'audio arrived before the "start" message')
        parsed = parse_json_object(message)
        if message_type(parsed) != "start":
            raise ProtocolError("not_started", 'the first message must be {"type": "start", ...}')
        return SessionConfig.from_message(parsed)

    async def open(self, config: SessionConfig) -> None:
        """Build the session's source, recognizer and pipeline."""
        self.config = config
        self.context.metrics.sessions_total += 1
        options = self.options
        self.source = NetworkSource(
            config.sample_rate, live=config.realtime, buffer_seconds=options.source_buffer_seconds, name=f"session {self.id}"
        )
        pipeline_options = options.pipeline
        if config.chunk_seconds is not None:
            pipeline_options = dataclasses.replace(pipeline_options, chunk_seconds=config.chunk_seconds)
        # Building the VAD (an ONNX session) and the recognizer takes milliseconds of CPU: keep
        # it off the event loop, which is serving every other session meanwhile.
        stages = await asyncio.to_thread(self._build_stages, config)
        # Emptied, not unpacked: asyncio's thread futures reference each other (a cycle that
        # only the full garbage collection frees), and a result left in them would keep this
        # session's recognizer alive long after the session ends.
        vad, recognizer = stages.pop(0), stages.pop(0)
        self.pipeline = asr_pipeline(
            self.source, recognizer, [EventSink(self)], vad=vad, options=pipeline_options, lane=self.context.engine.lane()
        )
        self.log(
            logging.INFO, "session_start", "session started",
            sample_rate=config.sample_rate, encoding=config.encoding, channels=config.channels,
            realtime=config.realtime, partials=config.partials,
        )  # fmt: skip

    def _build_stages(self, config: SessionConfig) -> list[Any]:
        """``[vad or None, recognizer]`` (a list, which :meth:`open` empties)."""
        vad = StreamingVAD(self.options.vad) if self.options.vad is not None else None
        return [vad, self.context.factory.create(config)]

    def ready_message(self) -> Optional[dict[str, Any]]:
        """The ``ready`` message (``None``: the dialect sends none)."""
        assert self.config is not None and self.pipeline is not None
        config, options = self.config, self.options
        return {
            "type": "ready",
            "version": PROTOCOL_VERSION,
            "session": self.id,
            "model": self.context.factory.model_name,
            "sample_rate": config.sample_rate,
            "encoding": config.encoding,
            "channels": config.channels,
            "partials": config.partials,
            "chunk": self.pipeline.options.chunk_seconds,
            "realtime": config.realtime,
            "unsupported": unsupported_options(self.context.factory, config),
            "ignored": list(config.ignored),
            "limits": {
                "max_message_bytes": options.max_message_bytes,
                "max_session_seconds": options.max_session_seconds,
                "idle_timeout_seconds": options.idle_timeout_seconds,
            },
        }

    # ----------------------------------------------------------------------------- receiving
    async def _receive_loop(self) -> None:
        deadline = self.opened_at + self.options.max_session_seconds
        while self.ending is None:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise asyncio.TimeoutError
                message = await asyncio.wait_for(self.connection.recv(), min(self.options.idle_timeout_seconds, left))
            except asyncio.TimeoutError:
                if time.monotonic() >= deadline:
                    error = ProtocolError("session_too_long", f"session reached the {self.options.max_session_seconds:g} s limit")
                else:
                    error = ProtocolError("idle_timeout", f"nothing received for {self.options.idle_timeout_seconds:g} s")
                self.end(Ending("limit", flush=True, close_code=error.close_code, error=error))
                return
            except ConnectionClosed:
                self.end(Ending("vanished", flush=False, close_code=None))
                return
            try:
                if isinstance(message, str):
                    await self.handle_text(message)
                else:
                    await self.handle_audio(message)
            except ProtocolError as error:
                self.end(Ending("error", flush=False, close_code=error.close_code, error=error))
                return

    async def handle_text(self, text: str) -> None:
        kind = message_type(parse_json_object(text))
        if kind == "start":
            raise ProtocolError("already_started", "this session has already started")
        self.end(Ending("stop", flush=True, close_code=CLOSE_NORMAL))

    async def handle_audio(self, data: bytes) -> None:
        assert self.config is not None and self.source is not None
        samples = decode_audio(data, self.config)
        if len(samples):
            await self.source.wait_for_room(len(samples))
            self.source.push(samples)

    def end(self, ending: Ending) -> None:
        """Decide how the session ends (the first decision wins) and stop taking audio."""
        if self.ending is not None:
            return
        self.ending = ending
        if self.source is not None:
            self.source.end()
        if self._receiver_task is not None and self._receiver_task is not asyncio.current_task():
            self._receiver_task.cancel()

    def shutdown(self) -> None:
        """Server shutdown: flush finals, then close with 1001 (going away)."""
        error = ProtocolError("shutting_down", "the server is shutting down")
        if self._receiver_task is None:  # still waiting for start: nothing to flush
            self.ending = Ending("shutdown", flush=False, close_code=CLOSE_GOING_AWAY, error=error)
            self._closer = asyncio.ensure_future(self._close(CLOSE_GOING_AWAY))
            return
        self.end(Ending("shutdown", flush=True, close_code=CLOSE_GOING_AWAY, error=error))

    # ----------------------------------------------------------------------------- pipeline
    async def _run_pipeline(self) -> None:
        assert self.pipeline is not None
        try:
            await self.pipeline.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("pipeline failed", extra={"event": "pipeline_failed", "session": self.id})
            error = ProtocolError("internal", "recognition failed on the server")
            self.end(Ending("error", flush=False, close_code=CLOSE_INTERNAL, error=error))

    def on_event(self, event: StreamEvent) -> None:
        """A pipeline event (event loop thread): queue it for the sender."""
        assert self.config is not None
        if event.type == "partial" and not self.config.partials:
            return
        self.send(event)

    # ------------------------------------------------------------------------------- sending
    def send(self, message: Union[StreamEvent, dict[str, Any]]) -> None:
        """Queue a message; a client whose backlog grows past the limit is dropped."""
        if self._queue.qsize() >= self.options.max_queued_events:
            error = ProtocolError("client_too_slow", "the client does not read its messages")
            self.end(Ending("error", flush=False, close_code=error.close_code, error=error))
            return
        self._queue.put_nowait(message)

    async def _send_loop(self) -> None:
        while True:
            item = await self._queue.get()
            if item is _CLOSE:
                return
            if isinstance(item, StreamEvent):
                # A partial with newer messages behind it is already out of date: skip it.
                if item.type == "partial" and not self._queue.empty():
                    continue
                self.context.metrics.events[item.type] += 1
                item = item.to_dict()
            if not await self._send_now(dumps(item)):
                return

    async def _send_now(self, text: str) -> bool:
        """Send one message; ``False`` (and the connection aborted) if the client stalls."""
        try:
            await asyncio.wait_for(self.connection.send(text), self.options.send_timeout_seconds)
            return True
        except asyncio.TimeoutError:
            self.log(logging.WARNING, "client_too_slow", "client stopped reading; dropping it")
            self.context.metrics.errors["client_too_slow"] += 1
            self.ending = self.ending or Ending("error", flush=False, close_code=None)
            self.connection.transport.abort()
            return False
        except ConnectionClosed:
            return False

    # ------------------------------------------------------------------------------- ending
    async def _finish(self) -> None:
        ending = self.ending
        assert ending is not None
        if ending.error is not None:
            self._count_error(ending.error)
        if self._pipeline_task is not None:
            if not ending.flush:
                self._pipeline_task.cancel()  # results are not owed: stop spending compute now
            try:
                await self._pipeline_task  # flush: the source has ended, so it drains and flushes
            except asyncio.CancelledError:
                pass
        if ending.close_code is None:
            return
        if ending.flush:
            for message in self.final_messages():
                self.send(message)
        if ending.error is not None:
            self.send(ending.error.to_message())
        await self._drain_sender()
        await self._close(ending.close_code)

    def final_messages(self) -> list[dict[str, Any]]:
        """Messages sent after the pipeline flushed (none: finals went out as events)."""
        return []

    async def _drain_sender(self) -> None:
        if self._sender_task is None or self._sender_task.done():
            return
        self._queue.put_nowait(_CLOSE)
        try:
            await asyncio.wait_for(asyncio.shield(self._sender_task), self.options.send_timeout_seconds * 2)
        except asyncio.TimeoutError:
            pass

    async def _close(self, code: int) -> None:
        self.context.metrics.closes[code] += 1
        try:
            await self.connection.close(code)
        except Exception:  # the peer is gone: nothing left to tell it
            pass

    def _count_error(self, error: ProtocolError) -> None:
        self.context.metrics.errors[error.code] += 1
        level = logging.INFO if error.code in ("idle_timeout", "session_too_long", "shutting_down") else logging.WARNING
        self.log(level, "session_error", error.message, code=error.code)

    async def _cleanup(self) -> None:
        tasks = [t for t in (self._receiver_task, self._pipeline_task, self._sender_task) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.source is not None:
            self.source.end()
        if self.pipeline is not None:
            self.context.metrics.add_session(self.pipeline.metrics)
            m = self.pipeline.metrics
            self.log(
                logging.INFO, "session_end", "session ended",
                reason=self.ending.reason if self.ending else "closed",
                audio_seconds=round(m.audio_seconds, 3), rtf=round(m.rtf, 3),
                dropped_seconds=round(m.dropped_seconds, 3), max_lag_seconds=round(m.max_lag_seconds, 3),
                finals=m.events.get("final", 0), wall_seconds=round(time.monotonic() - self.opened_at, 3),
            )  # fmt: skip
            self.release()
        self.context.unregister(self.id)

    def release(self) -> None:
        """Let go of the pipeline (recognizer state, VAD, buffers) once the session is over.

        The session, its pipeline (whose sink calls back into the session) and its tasks form
        reference cycles, which only Python's full garbage collection frees, and that runs
        rarely in a server holding a loaded model's ~300k objects. Until then every finished
        session kept its recognizer's caches: a 30-minute soak at four clients held ~9 finished
        sessions, ~200 MiB (``tests/streaming/server/test_soak.py``). Dropping the session's
        references here frees them by reference counting, at once.
        """
        if self.pipeline is not None:
            self._final_metrics = self.pipeline.metrics
        self.pipeline = None
        self.source = None
