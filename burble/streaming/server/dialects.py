"""The protocols a connection can speak, and which URL path speaks which.

A dialect is a ``Session`` class: ``Session`` itself speaks the burble protocol
(docs/protocol.md), ``VoskSession`` translates it to what vosk-server's clients expect. The
server looks a connection's path up in ``websocket_routes`` and never names a dialect class
itself, so a new dialect is one entry here.
"""

from __future__ import annotations

from burble.streaming.server.session import Session
from burble.streaming.server.tts_session import TtsSession
from burble.streaming.server.vosk import VoskSession

# Dialect name (``ServerOptions.dialect``, ``burble serve --dialect``) -> the session class.
DIALECTS: dict[str, type[Session]] = {"burble": Session, "vosk": VoskSession}

# Paths that always speak one dialect, whatever the root speaks.
FIXED_PATHS: dict[str, str] = {"/ws": "burble", "/vosk": "vosk"}


def websocket_routes(root_dialect: str) -> dict[str, type[Session]]:
    """URL path -> session class, with ``/`` speaking ``root_dialect`` and ``/tts`` speaking text to speech.

    The root is what clients written for another server connect to: vosk-server's own clients
    open ``ws://host:port/``, so ``root_dialect="vosk"`` makes burble a drop-in for them.

    Raises:
      ValueError: for a dialect name not in ``DIALECTS``.
    """
    if root_dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {root_dialect!r} (known: {', '.join(DIALECTS)})")
    routes = {path: DIALECTS[name] for path, name in FIXED_PATHS.items()}
    routes["/"] = DIALECTS[root_dialect]
    routes["/tts"] = TtsSession  # type: ignore[assignment]  # text in, audio out: not an ASR dialect
    return routes
