"""A finished session frees its recognizer at once, by reference counting.

A session, its pipeline and its tasks form reference cycles that only Python's full garbage
collection frees, and in a server holding a loaded model that runs rarely: before
``Session.release``, the 30-minute soak held ~9 finished sessions' recognizer caches (~200 MiB).
With the collector off, every recognizer of a finished session must still be gone; on the old code
all of them stayed (the negative control, run by hand when this test was written).
"""

from __future__ import annotations

import gc
import weakref
from typing import Optional

from burble.streaming.server.protocol import SessionConfig
from burble.testing.server import ServerThread, options_for_tests
from server_helpers import open_session, pcm16, read_until_closed
from streaming_helpers import FakeRecognizer

SESSIONS = 4


class WeakFactory:
    """Makes ``FakeRecognizer``s and keeps only weak references to them."""

    model_name = "fake"
    supported: frozenset[str] = frozenset()
    fixed_language: Optional[str] = "en"

    def __init__(self) -> None:
        self.recognizers: list[weakref.ref] = []

    def create(self, config: SessionConfig) -> FakeRecognizer:
        recognizer = FakeRecognizer()
        self.recognizers.append(weakref.ref(recognizer))
        return recognizer

    def warm_up(self) -> None:
        pass

    def alive(self) -> int:
        return sum(ref() is not None for ref in self.recognizers)


def test_finished_sessions_free_their_recognizers_without_the_garbage_collector(speech):
    audio, _ = speech
    factory = WeakFactory()
    gc.collect()
    gc.disable()
    try:
        with ServerThread(factory, options_for_tests()) as server:
            for _ in range(SESSIONS):
                ws, ready = open_session(server.url)
                assert ready["type"] == "ready"
                ws.send(pcm16(audio))
                ws.send('{"type": "stop"}')
                messages, code = read_until_closed(ws)
                ws.close()
                assert code == 1000 and any(m["type"] == "final" for m in messages)
            assert server.wait_idle()
            assert len(factory.recognizers) == SESSIONS
            assert factory.alive() == 0, f"{factory.alive()} of {SESSIONS} finished sessions' recognizers are alive"
    finally:
        gc.enable()
