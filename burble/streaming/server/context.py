"""``SessionContext``: everything a session may use of the server that accepted it.

A session never sees the ``AsrServer`` itself: it gets this small, read-only bundle, so the
session and dialect modules import nothing above them (the server imports them, never the
other way round) and a session can be built in a test without a server at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from burble.streaming.server.metrics import ServerMetrics
from burble.streaming.server.options import ServerOptions
from burble.streaming.engine import ComputeEngine
from burble.streaming.server.recognizers import RecognizerFactory


@dataclass(frozen=True)
class SessionContext:
    """What the server lends each of its sessions.

    Attributes:
      options: the server's options (limits, pipeline and VAD settings).
      metrics: the server-wide counters the session adds to (errors, closes, events, totals).
      engine: the server's compute engine; each session's recognizer calls go through a lane of it.
      factory: makes the session's recognizer.
      unregister: called with the session id once the session has ended and cleaned up, so
        the server's count of open sessions returns to zero.
      voice: returns the text-to-speech ``Synthesizer`` the ``/tts`` endpoint speaks with (loaded on
        first use; raises ``TTSInputError`` where no voice is installed).
    """

    options: ServerOptions
    metrics: ServerMetrics
    engine: ComputeEngine
    factory: RecognizerFactory
    unregister: Callable[[str], None]
    voice: Callable[[], Any] = lambda: _default_voice()


def _default_voice() -> Any:
    import burble.tts

    return burble.tts.load()
