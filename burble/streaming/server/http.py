"""Plain HTTP answers given from the WebSocket handshake hook: static page, health, metrics.

Static files come from a fixed table of names shipped in ``static/``: a request path is only
ever looked up in that table, never joined to a directory, so no client input reaches the file
system.
"""

from __future__ import annotations

import http
import json
from functools import lru_cache
from importlib import resources
from typing import Optional

from websockets.datastructures import Headers
from websockets.http11 import Response

# URL path -> (file in burble/streaming/server/static, content type)
STATIC_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/capture-worklet.js": ("capture-worklet.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}

# The page needs only its own scripts and a WebSocket back to this server.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self' ws: wss:; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


@lru_cache(maxsize=None)
def _static_bytes(name: str) -> bytes:
    return resources.files("burble.streaming.server").joinpath("static", name).read_bytes()


def response(status: http.HTTPStatus, body: bytes, content_type: str, extra: Optional[dict[str, str]] = None) -> Response:
    """An HTTP response with the headers every answer carries."""
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Connection"] = "close"
    for key, value in (extra or {}).items():
        headers[key] = value
    return Response(status.value, status.phrase, headers, body)


def text_response(status: http.HTTPStatus, text: str, extra: Optional[dict[str, str]] = None) -> Response:
    return response(status, text.encode("utf-8"), "text/plain; charset=utf-8", extra)


def json_response(status: http.HTTPStatus, value: dict) -> Response:
    return response(status, (json.dumps(value) + "\n").encode("utf-8"), "application/json")


def static_response(path: str) -> Optional[Response]:
    """The static file for ``path`` (query already removed), or ``None`` if there is none."""
    entry = STATIC_FILES.get(path)
    if entry is None:
        return None
    name, content_type = entry
    extra = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Referrer-Policy": "no-referrer"}
    return response(http.HTTPStatus.OK, _static_bytes(name), content_type, extra)
