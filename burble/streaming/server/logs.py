"""Structured logs: one JSON object per line (``burble serve --log-format json``).

Log calls pass their fields in ``extra`` (``event``, ``session``, ``code`` ...); the formatter
writes them next to the time, level, logger and message, so logs can be filtered by session or
event with ``jq`` or shipped to a log store as they are.
"""

from __future__ import annotations

import json
import logging
import time

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...extra fields}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Log to stderr as ``text`` (human) or ``json`` (one object per line)."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Library warnings (warnings.warn) become log records on "py.warnings", so with json they are
    # JSON lines like everything else instead of bare text on stderr.
    logging.captureWarnings(True)
    # websockets logs every failed handshake at INFO with a traceback; ours are enough.
    logging.getLogger("websockets").setLevel(logging.WARNING)
