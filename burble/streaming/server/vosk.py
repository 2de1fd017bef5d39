"""A Vosk-server compatible dialect at ``/vosk`` (and at ``/`` with ``--dialect vosk``, where
vosk-server's own clients connect), for clients written for vosk-server.

The Vosk protocol is request/response: the client optionally sends
``{"config": {"sample_rate": 16000, ...}}``, then 16-bit mono PCM frames, each answered by exactly
one message, and finally ``{"eof": 1}``, answered by the final result before the server closes:

- ``{"partial": "text of the current utterance so far"}`` while nothing new was finished;
- ``{"result": [{"word", "start", "end", "conf"}...], "text": "..."}`` when an utterance ended
  (one finished utterance per reply; words only if the config asked for ``"words"``);
- on ``eof``: ``{"text": ...}`` with everything not yet returned.

Recognition underneath is the same pipeline as ``/ws``; this class only translates. Audio is
taken with back-pressure (a Vosk client waits for each reply, so it paces itself by our speed).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Optional

from websockets.exceptions import ConnectionClosed

from burble.streaming.events import StreamEvent, Word, words_text
from burble.streaming.server.protocol import (
    CLOSE_NORMAL,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    ProtocolError,
    SessionConfig,
    parse_json_object,
)
from burble.streaming.server.session import Ending, Session


def _is_eof(message: dict[str, Any]) -> bool:
    return "eof" in message


class VoskSession(Session):
    """One ``/vosk`` connection (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.words = False
        self._first_audio: Optional[bytes] = None
        self._eof_first = False
        self._finished: deque[tuple[Word, ...]] = deque()  # utterances not yet returned
        self._committed: list[Word] = []  # finals of the current utterance
        self._tentative = ""  # latest partial tail of the current utterance

    # ----------------------------------------------------------------------------- starting
    async def await_start(self) -> Optional[SessionConfig]:
        rate = self.options.vosk_sample_rate
        while True:
            try:
                message = await asyncio.wait_for(self.connection.recv(), self.options.idle_timeout_seconds)
            except asyncio.TimeoutError:
                raise ProtocolError("idle_timeout", "no audio received") from None
            except ConnectionClosed:
                return None
            if isinstance(message, bytes):
                self._first_audio = message
                break
            parsed = parse_json_object(message)
            if _is_eof(parsed):
                self._eof_first = True
                break
            if "config" not in parsed:
                raise ProtocolError("unknown_type", 'expected {"config": {...}}, audio, or {"eof": 1}')
            rate = self._read_config(parsed["config"])
        return SessionConfig(sample_rate=rate, encoding="pcm_s16le", channels=1, partials=True, realtime=False)

    def _read_config(self, config: Any) -> int:
        if not isinstance(config, dict):
            raise ProtocolError("bad_field", "config must be an object")
        rate = config.get("sample_rate", self.options.vosk_sample_rate)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE or rate != int(rate):
            raise ProtocolError("bad_field", f"sample_rate must be an integer in [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}]")
        words = config.get("words", False)
        self.words = bool(words) if isinstance(words, (bool, int)) else False
        return int(rate)

    def ready_message(self) -> Optional[dict[str, Any]]:
        return None  # Vosk has no handshake reply

    async def _receive_loop(self) -> None:
        # The first message was read by await_start: handle it before reading more.
        if self._eof_first:
            self.end(Ending("stop", flush=True, close_code=CLOSE_NORMAL))
            return
        if self._first_audio is not None:
            try:
                await self.handle_audio(self._first_audio)
            except ProtocolError as error:
                self.end(Ending("error", flush=False, close_code=error.close_code, error=error))
                return
            self._first_audio = None
        await super()._receive_loop()

    # ----------------------------------------------------------------------------- messages
    async def handle_text(self, text: str) -> None:
        message = parse_json_object(text)
        if _is_eof(message):
            self.end(Ending("stop", flush=True, close_code=CLOSE_NORMAL))
            return
        if "config" in message:
            raise ProtocolError("already_started", "config must come before the audio")
        raise ProtocolError("unknown_type", 'expected audio or {"eof": 1}')

    async def handle_audio(self, data: bytes) -> None:
        await super().handle_audio(data)
        self.send(self._reply())

    def on_event(self, event: StreamEvent) -> None:
        if event.type == "partial":
            self._tentative = event.text
        elif event.type == "final":
            self._committed.extend(event.words)
            self._tentative = ""
        else:  # endpoint: the utterance is complete
            words = event.words or tuple(self._committed)
            if words:
                self._finished.append(tuple(words))
            self._committed, self._tentative = [], ""

    # ------------------------------------------------------------------------------ replies
    def _result(self, words: tuple[Word, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.words:
            out["result"] = [
                {"conf": 1.0, "end": round(w.end, 3), "start": round(w.start, 3), "word": w.word.strip()} for w in words
            ]
        out["text"] = words_text(words).strip()
        return out

    def _reply(self) -> dict[str, Any]:
        if self._finished:
            return self._result(self._finished.popleft())
        return {"partial": (words_text(self._committed) + self._tentative).strip()}

    def final_messages(self) -> list[dict[str, Any]]:
        # After the flush every utterance has ended; return all not yet returned as one result.
        words: list[Word] = []
        while self._finished:
            words.extend(self._finished.popleft())
        words.extend(self._committed)
        return [self._result(tuple(words))]
