"""The WebSocket streaming ASR service (``burble serve``) and its browser page.

- ``protocol``: the versioned JSON protocol (messages, validation, error and close codes).
- ``options``: ``ServerOptions``.
- ``server``: ``AsrServer`` (routes, limits, warm-up, shutdown).
- ``dialects``: which URL path speaks which protocol (``Session`` classes);
  ``session``: one connection over the standard streaming pipeline; ``vosk``: the Vosk dialect.
- ``context``: ``SessionContext``, what a session may use of the server.
- ``source``: ``NetworkSource``, the pipeline's audio source for a connection.
- ``recognizers``: per-session recognizers over one shared model (their calls run on the
  server's ``burble.streaming.engine.ComputeEngine``).
- ``security``: token and Origin checks; ``http``: static page, health and metrics answers.
- ``metrics``, ``logs``: counters and structured logs.

The protocol is documented in docs/protocol.md; the client is ``burble.streaming.client``.
"""

from burble.streaming.server.options import ServerOptions
from burble.streaming.server.protocol import PROTOCOL_VERSION, ProtocolError, SessionConfig
from burble.streaming.server.recognizers import RecognizerFactory, WhisperRecognizerFactory
from burble.streaming.server.server import AsrServer

__all__ = [
    "PROTOCOL_VERSION",
    "AsrServer",
    "ProtocolError",
    "RecognizerFactory",
    "ServerOptions",
    "SessionConfig",
    "WhisperRecognizerFactory",
]
