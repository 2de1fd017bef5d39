"""Server-wide counters for ``/metrics`` (Prometheus text) and ``/metrics.json``.

Finished sessions add their pipeline metrics to the totals; ``snapshot`` adds the live values of
the sessions still running, so the numbers move while a long session streams.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Optional

from burble.streaming.loop import PipelineMetrics


@dataclass
class ServerMetrics:
    """Counters since the server started.

    Attributes:
      sessions_total: sessions that sent a valid ``start``.
      rejected: connections refused, by reason (``auth``, ``origin``, ``busy``, ``lagging``, ``shutting_down``).
      errors: protocol errors sent, by error code.
      closes: sessions ended, by WebSocket close code.
      audio_seconds: audio received by finished sessions.
      recognizer_seconds: wall time finished sessions spent in the recognizer.
      dropped_seconds: audio finished sessions lost because recognition fell behind.
      events: events sent, by type.
    """

    started_at: float = field(default_factory=time.monotonic)
    sessions_total: int = 0
    rejected: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    closes: Counter = field(default_factory=Counter)
    audio_seconds: float = 0.0
    recognizer_seconds: float = 0.0
    dropped_seconds: float = 0.0
    events: Counter = field(default_factory=Counter)

    def add_session(self, metrics: PipelineMetrics) -> None:
        """Fold a finished session's pipeline metrics into the totals."""
        self.audio_seconds += metrics.audio_seconds
        self.recognizer_seconds += metrics.recognizer_seconds
        self.dropped_seconds += metrics.dropped_seconds

    def snapshot(
        self, sessions: Mapping[str, PipelineMetrics], *, sessions_active: int, compute_running: int, compute_waiting: int,
        compute_batches: Optional[Mapping[int, int]] = None,
    ) -> dict:
        """All values as a JSON-ready dict (totals include the running sessions, by session id)."""
        active = list(sessions.values())
        audio = self.audio_seconds + sum(m.audio_seconds for m in active)
        busy = self.recognizer_seconds + sum(m.recognizer_seconds for m in active)
        return {
            "uptime_seconds": round(time.monotonic() - self.started_at, 3),
            "sessions_active": sessions_active,
            "sessions_total": self.sessions_total,
            "rejected": dict(self.rejected),
            "errors": dict(self.errors),
            "closes": {str(k): v for k, v in self.closes.items()},
            "audio_seconds": round(audio, 3),
            "recognizer_seconds": round(busy, 3),
            "rtf": round(busy / audio, 4) if audio else 0.0,
            "dropped_seconds": round(self.dropped_seconds + sum(m.dropped_seconds for m in active), 3),
            "max_lag_seconds": round(max((m.max_lag_seconds for m in active), default=0.0), 3),
            "lag_seconds": round(max((m.lag_seconds for m in active), default=0.0), 3),
            "session_lag_seconds": {session_id: round(m.lag_seconds, 3) for session_id, m in sessions.items()},
            "events": dict(self.events),
            "compute_running": compute_running,
            "compute_waiting": compute_waiting,
            # Recognizer calls the engine ran together (their windows decoded as rows of one
            # batch), by batch size: the engine's batch-size histogram.
            "compute_batches": {str(size): n for size, n in sorted((compute_batches or {}).items())},
        }


def prometheus_text(snapshot: dict) -> str:
    """Prometheus text exposition (version 0.0.4) of a ``snapshot``."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP burble_{name} {help_text}")
        lines.append(f"# TYPE burble_{name} {kind}")
        for labels, value in samples:
            lines.append(f"burble_{name}{labels} {value:g}")

    def labelled(key: str, values: dict) -> list[tuple[str, float]]:
        return [(f'{{{key}="{k}"}}', float(v)) for k, v in sorted(values.items())] or [("", 0.0)]

    s = snapshot
    metric("sessions_active", "gauge", "Sessions currently open.", [("", s["sessions_active"])])
    metric("sessions_total", "counter", "Sessions started.", [("", s["sessions_total"])])
    metric("rejected_total", "counter", "Connections refused.", labelled("reason", s["rejected"]))
    metric("errors_total", "counter", "Protocol errors sent.", labelled("code", s["errors"]))
    metric("closes_total", "counter", "Sessions closed, by close code.", labelled("code", s["closes"]))
    metric("events_total", "counter", "Events sent, by type.", labelled("type", s["events"]))
    metric("audio_seconds_total", "counter", "Audio received, seconds.", [("", s["audio_seconds"])])
    metric("recognizer_seconds_total", "counter", "Recognizer wall time, seconds.", [("", s["recognizer_seconds"])])
    metric("real_time_factor", "gauge", "Recognizer seconds per audio second.", [("", s["rtf"])])
    metric("dropped_seconds_total", "counter", "Audio dropped because recognition fell behind.", [("", s["dropped_seconds"])])
    metric("max_lag_seconds", "gauge", "Largest processing lag among open sessions.", [("", s["max_lag_seconds"])])
    metric("lag_seconds", "gauge", "Current processing lag of each open session.", labelled("session", s["session_lag_seconds"]))
    metric("compute_running", "gauge", "Recognizer calls running.", [("", s["compute_running"])])
    metric("compute_waiting", "gauge", "Recognizer calls waiting for a compute slot.", [("", s["compute_waiting"])])
    metric("compute_batches_total", "counter", "Batches of recognizer calls decoded together, by size.", labelled("size", s["compute_batches"]))
    metric("uptime_seconds", "gauge", "Seconds since the server started.", [("", s["uptime_seconds"])])
    return "\n".join(lines) + "\n"
