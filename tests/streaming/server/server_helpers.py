"""Helpers for the server tests: a model-free recognizer factory and raw protocol clients.

(A uniquely named module rather than ``conftest`` so test files can import it unambiguously.)
"""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from burble.streaming.server.protocol import SessionConfig
from streaming_helpers import FakeRecognizer


class FakeFactory:
    """Makes ``FakeRecognizer``s (one deterministic word per accepted chunk, no model)."""

    model_name = "fake"
    supported: frozenset[str] = frozenset()
    fixed_language: Optional[str] = "en"

    def __init__(self, delay: float = 0.0, keep_audio: bool = False) -> None:
        self.delay = delay
        self.keep_audio = keep_audio
        self.created: list[FakeRecognizer] = []
        self.configs: list[SessionConfig] = []
        self.warm_ups = 0

    def create(self, config: SessionConfig) -> FakeRecognizer:
        recognizer = FakeRecognizer(delay=self.delay, keep_audio=self.keep_audio)
        self.created.append(recognizer)
        self.configs.append(config)
        return recognizer

    def warm_up(self) -> None:
        self.warm_ups += 1  # nothing to warm: counted, so a test can see the server asked


def open_session(url: str, start: Optional[dict[str, Any]] = None, **kwargs: Any) -> tuple[ClientConnection, dict]:
    """Connect, send ``start`` (defaults: 16 kHz s16 mono), return the connection and ``ready``."""
    ws = connect(url, compression=None, open_timeout=10, legacy=True, **kwargs)
    message = {"type": "start", "sample_rate": 16000, "encoding": "pcm_s16le"}
    message.update(start or {})
    ws.send(json.dumps(message))
    ready = json.loads(ws.recv(timeout=10))
    return ws, ready


def pcm16(samples: np.ndarray) -> bytes:
    return np.clip(np.round(samples * 32768), -32768, 32767).astype("<i2").tobytes()


def read_until_closed(ws: ClientConnection, timeout: float = 20.0) -> tuple[list[dict], Optional[int]]:
    """Every message until the server closes; returns them and the close code."""
    messages = []
    try:
        while True:
            messages.append(json.loads(ws.recv(timeout=timeout)))
    except ConnectionClosed as e:
        return messages, (e.rcvd.code if e.rcvd is not None else None)
    except TimeoutError:
        return messages, -1


def errors(messages: list[dict]) -> list[str]:
    return [m["code"] for m in messages if m.get("type") == "error"]


class FloodRecognizer:
    """Answers every ``accept`` with a huge partial (tests a client that never reads)."""

    def __init__(self, words: int = 1500) -> None:
        self.words = words
        self.calls = 0

    def accept(self, audio: np.ndarray, start_sample: int) -> list:
        from burble.streaming.events import StreamEvent, Word

        self.calls += 1
        t = start_sample / 16000
        return [StreamEvent.from_words("partial", [Word(f" flood{i}", t, t) for i in range(self.words)])]

    def endpoint(self, at_sample: int) -> list:
        return []

    def pause(self, at_sample: int) -> list:
        return []

    def flush(self) -> list:
        return []


class FloodFactory(FakeFactory):
    model_name = "flood"

    def create(self, config: SessionConfig) -> FloodRecognizer:  # type: ignore[override]
        return FloodRecognizer()


class ChecksumRecognizer:
    """Commits, at the end of the stream, one word naming a hash of every sample it was given
    (and their count): two sessions get the same final text exactly when the same audio reached
    their recognizers, however the server chunked it."""

    def __init__(self) -> None:
        import hashlib

        self._hash = hashlib.sha256()
        self._samples = 0

    def accept(self, audio: np.ndarray, start_sample: int) -> list:
        assert start_sample == self._samples, "audio must arrive contiguous and in order"
        self._hash.update(np.ascontiguousarray(audio, dtype=np.float32).tobytes())
        self._samples += len(audio)
        return []

    def pause(self, at_sample: int) -> list:
        return []

    def endpoint(self, at_sample: int) -> list:
        return []

    def flush(self) -> list:
        from burble.streaming.events import StreamEvent, Word

        if not self._samples:
            return []
        word = Word(f" {self._samples}:{self._hash.hexdigest()[:16]}", 0.0, self._samples / 16000)
        return [StreamEvent.from_words("final", [word], segment_id=0)]


class ChecksumFactory(FakeFactory):
    """Makes ``ChecksumRecognizer``s."""

    def create(self, config: SessionConfig) -> ChecksumRecognizer:  # type: ignore[override]
        self.configs.append(config)
        return ChecksumRecognizer()
