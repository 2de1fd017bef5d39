"""Who may open a session: the bearer token and the browser ``Origin`` allow-list.

Both checks run in the opening handshake (``process_request``), before any session state
exists, and answer with a plain HTTP status (401 / 403) that every client library reports.

The token may come in the ``Authorization: Bearer <token>`` header (CLI and Python clients) or
the ``token`` query parameter (browsers cannot set headers on a WebSocket). It is compared in
constant time (``hmac.compare_digest``) so response timing reveals nothing about it.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import parse_qs, urlsplit

from websockets.datastructures import Headers

logger = logging.getLogger(__name__)


def load_token(path: str | Path) -> str:
    """Read a bearer token from a file (first line, surrounding whitespace stripped).

    Raises:
      ValueError: if the file is empty.
      FileNotFoundError: if it does not exist.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ValueError(f"token file {path} is empty")
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRGRP | stat.S_IROTH) and os.name == "posix":
            logger.warning("token file %s is readable by other users (chmod 600 it)", path)
    except OSError:
        pass
    return token


def presented_token(headers: Headers, path: str) -> Optional[str]:
    """The token a request carries: the bearer header first, else the ``token`` query parameter."""
    auth = headers.get("Authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    values = parse_qs(urlsplit(path).query).get("token")
    return values[0] if values else None


def token_matches(expected: Optional[str], presented: Optional[str]) -> bool:
    """Constant-time comparison; no expected token means authentication is off."""
    if expected is None:
        return True
    if presented is None:
        return False
    # compare_digest on bytes: constant time in the length of the presented value.
    return hmac.compare_digest(expected.encode("utf-8"), presented.encode("utf-8", "surrogatepass"))


def origin_allowed(origin: Optional[str], host: Optional[str], allowed: Sequence[str]) -> bool:
    """Whether a request's ``Origin`` may open a session.

    Args:
      origin: the ``Origin`` header (``None``: not a browser, allowed; the token protects it).
      host: the ``Host`` header, to recognise the page this server itself served.
      allowed: configured origins; ``"*"`` allows all.
    """
    if origin is None or "*" in allowed:
        return True
    origin = origin.rstrip("/")
    if origin in (o.rstrip("/") for o in allowed):
        return True
    parts = urlsplit(origin)
    # Same origin: the page was loaded from this very host:port (the built-in page).
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()
