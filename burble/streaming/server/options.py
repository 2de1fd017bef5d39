"""``ServerOptions``: every setting of ``burble serve`` (CLI flags map onto these 1:1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from burble.streaming.loop import PipelineOptions
from burble.audio.vad import VADOptions


@dataclass(frozen=True)
class ServerOptions:
    """How the WebSocket ASR server listens, limits and recognises.

    Attributes:
      host: interface to bind. The default serves this machine only; binding another interface
        without a token logs a warning (anyone who can reach the port can use the model).
      port: TCP port (0 picks a free one; ``AsrServer.port`` tells which).
      token: bearer token clients must present (``Authorization: Bearer T`` or ``?token=T``);
        ``None`` disables authentication.
      allowed_origins: browser origins (``http://host:port``) allowed to open sessions. Requests
        without an ``Origin`` header (non-browser clients) and same-origin pages (the built-in page)
        are always allowed; ``"*"`` allows every origin.
      max_sessions: concurrent sessions; more get ``error server_busy`` and close code 1013.
      admit_max_lag_seconds: a new session is refused the same way (with a ``retry_after``
        hint) while an open session's recognition lags this far behind its audio: the compute
        is spent, and one more stream would slow every stream down (``None``: only
        ``max_sessions`` limits).
      max_message_bytes: largest WebSocket message accepted (close code 1009 beyond).
      max_session_seconds: a session is ended (finals flushed) after this much wall time.
      idle_timeout_seconds: a session that sends nothing for this long is ended.
      send_timeout_seconds: a client that does not read our messages for this long is dropped.
      max_queued_events: events waiting for a slow reader before it is dropped.
      shutdown_grace_seconds: on SIGTERM, how long sessions get to flush their finals.
      compute_slots: recognizer calls that may run at once across all sessions (``None``:
        one per CPU core); the rest wait their turn, so N sessions share the cores predictably.
      pipeline: event loop settings for every session (``chunk_seconds`` is the default chunk).
      vad: VAD settings, or ``None`` to send all audio to the recognizer.
      source_buffer_seconds: per-session capture buffer (audio waiting to be resampled).
      vosk_sample_rate: sample rate assumed by the Vosk-compatible endpoint until a client
        sends ``{"config": {"sample_rate": ...}}``.
      dialect: the protocol WebSocket clients of the root URL ``/`` speak: ``"burble"``
        (docs/protocol.md, as at ``/ws``) or ``"vosk"`` (as at ``/vosk``: a drop-in for
        vosk-server, whose clients connect to the root). ``/ws`` and ``/vosk`` never change.
      static: serve the browser page at ``/``.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    token: Optional[str] = None
    allowed_origins: tuple[str, ...] = ()
    max_sessions: int = 8
    admit_max_lag_seconds: Optional[float] = 2.0
    max_message_bytes: int = 1 << 19
    max_session_seconds: float = 3600.0
    idle_timeout_seconds: float = 30.0
    send_timeout_seconds: float = 10.0
    max_queued_events: int = 1000
    shutdown_grace_seconds: float = 15.0
    compute_slots: Optional[int] = None
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    vad: Optional[VADOptions] = field(default_factory=VADOptions)
    source_buffer_seconds: float = 5.0
    vosk_sample_rate: int = 16000
    dialect: str = "burble"
    static: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.token is not None and not self.token.strip():
            raise ValueError("token must not be empty")
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        if self.admit_max_lag_seconds is not None and self.admit_max_lag_seconds <= 0:
            raise ValueError("admit_max_lag_seconds must be > 0 (or None)")
        if self.max_message_bytes < 1024:
            raise ValueError("max_message_bytes must be >= 1024")
        for name in ("max_session_seconds", "idle_timeout_seconds", "send_timeout_seconds", "shutdown_grace_seconds", "source_buffer_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.max_queued_events < 10:
            raise ValueError("max_queued_events must be >= 10")
        if self.compute_slots is not None and self.compute_slots < 1:
            raise ValueError("compute_slots must be >= 1")
        for origin in self.allowed_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"allowed origins look like http://host:port, got {origin!r}")
