"""``/tts``: text in, audio frames out, over the service's WebSocket port (docs/protocol.md).

A client sends ``{"type": "speak", "text": ...}`` (optionally ``temperature``, ``seed``,
``encoding``); the server answers ``audio_start``, then binary frames of audio while the codec LM
generates them (``burble.tts.pipeline.TTSStage``, the pipeline ``burble speak`` runs), then
``audio_end``. A session may speak any number of texts, one at a time; ``{"type": "stop"}``
closes it (1000).

The same authentication, origin checks and limits as ``/ws`` apply (the server checks the
handshake and the session count before a session exists). A text that cannot be spoken (empty,
too long, nothing pronounceable) gets an ``error`` with code ``bad_text`` and the session goes
on; malformed JSON, binary frames and unknown message types end it with the code ``/ws`` uses.
A client that stops reading is dropped after ``send_timeout_seconds``.

Synthesis runs on a worker thread (not the recognizers' compute engine), so the event loop keeps
serving every other session meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from burble.streaming.loop import PipelineMetrics
from burble.streaming.server.context import SessionContext
from burble.streaming.server.protocol import (
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    ProtocolError,
    dumps,
    message_type,
    parse_json_object,
)

logger = logging.getLogger("burble.server")

MAX_TEXT_CHARS = 5000
TTS_ENCODINGS = ("pcm_s16le", "f32le")


class SpeakRequest:
    """A validated ``speak`` message."""

    def __init__(self, message: dict[str, Any]) -> None:
        text = message.get("text")
        if not isinstance(text, str):
            raise ProtocolError("bad_field", '"text" must be a string')
        self.text = text
        self.encoding = message.get("encoding", "pcm_s16le")
        if self.encoding not in TTS_ENCODINGS:
            raise ProtocolError("bad_field", f'"encoding" must be one of {", ".join(TTS_ENCODINGS)}')
        temperature = message.get("temperature")  # None: the voice's default (greedy)
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                        or not 0 <= temperature <= 2):
            raise ProtocolError("bad_field", '"temperature" must be a number in [0, 2]')
        self.temperature: Optional[float] = None if temperature is None else float(temperature)
        seed = message.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31):
            raise ProtocolError("bad_field", '"seed" must be an integer in [0, 2^31)')
        self.seed = seed


class TtsSession:
    """One ``/tts`` connection (see the module docstring); the server drives it like ``Session``."""

    def __init__(self, context: SessionContext, connection: ServerConnection, session_id: str) -> None:
        self.context = context
        self.options = context.options
        self.connection = connection
        self.id = session_id
        self.opened_at = time.monotonic()
        self.metrics = PipelineMetrics()
        self._closing: Optional[ProtocolError] = None
        self._task: Optional[asyncio.Task] = None

    async def run(self) -> None:
        self.context.metrics.sessions_total += 1
        self._task = asyncio.current_task()
        code = CLOSE_NORMAL
        try:
            code = await self._serve()
        except ProtocolError as error:
            self._count(error)
            await self._send(dumps(error.to_message()))
            code = error.close_code
        except ConnectionClosed:
            code = None
        except asyncio.CancelledError:
            error = self._closing or ProtocolError("shutting_down", "the server is shutting down")
            await self._send(dumps(error.to_message()))
            code = error.close_code
        except Exception:
            logger.exception("tts session failed", extra={"event": "session_failed", "session": self.id})
            await self._send(dumps(ProtocolError("internal", "speech synthesis failed on the server").to_message()))
            code = CLOSE_INTERNAL
        finally:
            if code is not None:
                self.context.metrics.closes[code] += 1
                try:
                    await self.connection.close(code)
                except Exception:  # the peer is gone
                    pass
            self.context.unregister(self.id)

    def shutdown(self) -> None:
        """Server shutdown: the text being spoken is cut short, then 1001."""
        self._closing = ProtocolError("shutting_down", "the server is shutting down")
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _serve(self) -> int:
        deadline = self.opened_at + self.options.max_session_seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("session_too_long", f"session reached the {self.options.max_session_seconds:g} s limit")
            try:
                message = await asyncio.wait_for(self.connection.recv(), min(self.options.idle_timeout_seconds, left))
            except asyncio.TimeoutError:
                if time.monotonic() >= deadline:
                    raise ProtocolError("session_too_long", f"session reached the {self.options.max_session_seconds:g} s limit") from None
                raise ProtocolError("idle_timeout", f"nothing received for {self.options.idle_timeout_seconds:g} s") from None
            if not isinstance(message, str):
                raise ProtocolError("bad_message", 'the /tts endpoint takes JSON text messages ({"type": "speak", ...}), not binary frames')
            parsed = parse_json_object(message)
            if message_type(parsed, ("speak", "stop")) == "stop":
                return CLOSE_NORMAL
            await self._speak(SpeakRequest(parsed))

    async def _speak(self, request: SpeakRequest) -> None:
        from burble.tts.normalize import TTSInputError
        from burble.tts.pipeline import TTSStage
        from burble.tts.synthesizer import DEFAULT_TEMPERATURE, SynthesisOptions

        if len(request.text) > MAX_TEXT_CHARS:
            await self._bad_text(f"the text is {len(request.text)} characters; at most {MAX_TEXT_CHARS} per message")
            return
        try:
            synthesizer = await asyncio.to_thread(self.context.voice)
        except TTSInputError as error:  # no voice installed
            await self._bad_text(f"speech synthesis is not available on this server: {error}")
            return
        temperature = DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
        stage = TTSStage(synthesizer, SynthesisOptions(temperature=temperature, seed=request.seed))
        started = time.monotonic()
        # Sent before the first chunk (a bad text raises before any): an error replaces it.
        audio_start = dumps({"type": "audio_start", "sample_rate": synthesizer.sample_rate,
                             "encoding": request.encoding, "channels": 1})
        first = True
        try:
            async for chunk in stage.speak(request.text):
                if first:
                    await self._send_or_drop(audio_start)
                    first = False
                samples = chunk.samples
                data = (np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2") if request.encoding == "pcm_s16le"
                        else samples.astype("<f4"))
                await self._send_or_drop(data.tobytes())
        except TTSInputError as error:
            await self._bad_text(str(error))
            return
        if first:  # no audio at all (a generation that ended at once): the reply keeps its shape
            await self._send_or_drop(audio_start)
        seconds = stage.samples / synthesizer.sample_rate
        self.metrics.audio_seconds += seconds
        await self._send_or_drop(dumps({"type": "audio_end", "samples": stage.samples, "seconds": round(seconds, 3),
                                        "wall_seconds": round(time.monotonic() - started, 3)}))

    async def _bad_text(self, message: str) -> None:
        """A text that cannot be spoken: say so; the session goes on."""
        self.context.metrics.errors["bad_text"] += 1
        logger.info(message, extra={"event": "session_error", "session": self.id, "code": "bad_text"})
        await self._send_or_drop(dumps({"type": "error", "code": "bad_text", "message": message}))

    async def _send_or_drop(self, data: str | bytes) -> None:
        if not await self._send(data):
            raise ConnectionClosed(None, None)

    async def _send(self, data: str | bytes) -> bool:
        """One message; a client that does not read for ``send_timeout_seconds`` is dropped."""
        try:
            await asyncio.wait_for(self.connection.send(data), self.options.send_timeout_seconds)
            return True
        except asyncio.TimeoutError:
            self.context.metrics.errors["client_too_slow"] += 1
            logger.warning("client stopped reading; dropping it", extra={"event": "client_too_slow", "session": self.id})
            self.connection.transport.abort()
            return False
        except ConnectionClosed:
            return False

    def _count(self, error: ProtocolError) -> None:
        self.context.metrics.errors[error.code] += 1
        logger.info(error.message, extra={"event": "session_error", "session": self.id, "code": error.code})

