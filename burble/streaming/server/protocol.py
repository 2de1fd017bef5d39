"""The burble streaming ASR protocol, version 1 (see docs/protocol.md): parsing and validation.

Client -> server:

- text ``{"type": "start", ...}`` (once, first): the audio format and recognition options,
  parsed into a ``SessionConfig``;
- binary frames: raw PCM (``pcm_s16le`` or ``f32le``, interleaved channels), whole sample frames;
- text ``{"type": "stop"}``: no more audio; the server flushes every final result, then closes
  with code 1000.

Server -> client: ``ready``, ``partial``, ``final``, ``endpoint`` (``StreamEvent.to_dict()``,
exactly the JSON lines of ``burble stream --json``) and ``error`` ``{code, message}``.

Everything a client sends is validated here, strictly and with a message that says what is
wrong: JSON must be an object of known fields with the right types (``true`` is not a number,
``NaN``/``Infinity`` are not numbers), numbers must be in range, audio frames must hold whole,
finite sample frames. A protocol error is fatal: the server sends ``error`` and closes with the
close code of ``CLOSE_CODES``. Nothing the client sends is ever used as a path or a command.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

PROTOCOL_VERSION = 1

ENCODINGS = ("pcm_s16le", "f32le")
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "f32le": 4}
MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 192000
MAX_CHANNELS = 8
MIN_CHUNK_SECONDS = 0.1
MAX_CHUNK_SECONDS = 10.0
MAX_HOTWORDS = 100
MAX_HOTWORD_CHARS = 100
MAX_LANGUAGE_CHARS = 16

# WebSocket close codes (RFC 6455 section 7.4.1).
CLOSE_NORMAL = 1000  # stop handled, every final sent
CLOSE_GOING_AWAY = 1001  # the server is shutting down
CLOSE_INVALID_DATA = 1007  # malformed JSON or audio
CLOSE_POLICY = 1008  # protocol misuse or a limit (session length, idle, slow reader)
CLOSE_TOO_BIG = 1009  # a frame larger than the server's max message size
CLOSE_INTERNAL = 1011  # a server bug
CLOSE_TRY_LATER = 1013  # too many concurrent sessions

# Error codes (the ``code`` of an ``error`` message) and the close code each one ends with.
CLOSE_CODES: dict[str, int] = {
    "bad_json": CLOSE_INVALID_DATA,
    "bad_message": CLOSE_POLICY,
    "unknown_type": CLOSE_POLICY,
    "bad_field": CLOSE_POLICY,
    "unsupported_version": CLOSE_POLICY,
    "not_started": CLOSE_POLICY,
    "already_started": CLOSE_POLICY,
    "bad_audio": CLOSE_INVALID_DATA,
    "session_too_long": CLOSE_POLICY,
    "idle_timeout": CLOSE_POLICY,
    "client_too_slow": CLOSE_POLICY,
    "server_busy": CLOSE_TRY_LATER,
    "shutting_down": CLOSE_GOING_AWAY,
    "internal": CLOSE_INTERNAL,
}


class ProtocolError(Exception):
    """A client broke the protocol (or hit a limit); ``code`` is one of ``CLOSE_CODES``.

    Args:
      code: machine-readable error code.
      message: what was wrong, for a human.
      retry_after: seconds after which trying again may succeed (``server_busy``), if known.
    """

    def __init__(self, code: str, message: str, *, retry_after: Optional[float] = None) -> None:
        if code not in CLOSE_CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @property
    def close_code(self) -> int:
        return CLOSE_CODES[self.code]

    def to_message(self) -> dict[str, Any]:
        """The ``error`` message that tells the client about this error."""
        message: dict[str, Any] = {"type": "error", "code": self.code, "message": self.message}
        if self.retry_after is not None:
            message["retry_after"] = round(self.retry_after, 1)
        return message


# ------------------------------------------------------------------------------------ JSON
def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN, Infinity and -Infinity by default; they are not JSON numbers.
    raise ValueError(f"{name} is not a valid JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # e.g. 1e999 parses to inf
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse a client text message that must be a JSON object.

    Raises:
      ProtocolError: ``bad_json`` for anything that is not strict, finite JSON, ``bad_message``
        for JSON that is not an object.
    """
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise ProtocolError("bad_json", f"text messages must be JSON: {_short(str(e))}") from None
    if not isinstance(value, dict):
        raise ProtocolError("bad_message", f"a message must be a JSON object, got {type(value).__name__}")
    return value


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def message_type(message: dict[str, Any], known: tuple[str, ...] = ("start", "stop")) -> str:
    """The ``type`` field of a client message, one of ``known`` (``/ws``: ``start`` or ``stop``)."""
    expected = " or ".join(f'"{k}"' for k in known)
    kind = message.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("bad_message", f'a message needs a string "type" field ({expected})')
    if kind not in known:
        raise ProtocolError("unknown_type", f"unknown message type {_short(repr(kind), 40)} (expected {expected})")
    return kind


# ------------------------------------------------------------------------------ field checks
def _int_field(message: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = message.get(name, default)
    # bool is an int subclass in Python: {"channels": true} must not mean 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError("bad_field", f"{name} must be an integer, got {_json_type(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ProtocolError("bad_field", f"{name} must be an integer, got {value}")
        value = int(value)
    if not lo <= value <= hi:
        raise ProtocolError("bad_field", f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _float_field(message: dict[str, Any], name: str, default: Optional[float], lo: float, hi: float) -> Optional[float]:
    value = message.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError("bad_field", f"{name} must be a number, got {_json_type(value)}")
    value = float(value)
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ProtocolError("bad_field", f"{name} must be in [{lo:g}, {hi:g}], got {value:g}")
    return value


def _bool_field(message: dict[str, Any], name: str, default: bool) -> bool:
    value = message.get(name, default)
    if not isinstance(value, bool):
        raise ProtocolError("bad_field", f"{name} must be true or false, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


START_FIELDS = frozenset(
    ("type", "version", "sample_rate", "encoding", "channels", "language", "hotwords", "partials", "chunk", "realtime")
)


@dataclass(frozen=True)
class SessionConfig:
    """A validated ``start`` message.

    Attributes:
      sample_rate: rate of the client's audio (the server resamples to 16 kHz).
      encoding: ``pcm_s16le`` or ``f32le``.
      channels: interleaved channels per sample frame (down-mixed to mono).
      language: language code, or ``None`` for the model's default.
      hotwords: words/phrases to favour (passed to recognizers that support biasing).
      partials: send ``partial`` events (False: only ``final`` and ``endpoint``).
      chunk_seconds: speech audio per recognizer step, ``None`` for the server default.
      realtime: the client sends audio as it is captured (a slow server drops the oldest audio);
        False: the client sends faster than real time and the server applies back-pressure
        instead (nothing is dropped).
      ignored: unknown start fields, reported back in ``ready``.
    """

    sample_rate: int = 16000
    encoding: str = "pcm_s16le"
    channels: int = 1
    language: Optional[str] = None
    hotwords: tuple[str, ...] = ()
    partials: bool = True
    chunk_seconds: Optional[float] = None
    realtime: bool = True
    ignored: tuple[str, ...] = ()

    @property
    def frame_bytes(self) -> int:
        """Bytes per sample frame (all channels of one sample instant)."""
        return BYTES_PER_SAMPLE[self.encoding] * self.channels

    @property
    def bytes_per_second(self) -> int:
        return self.frame_bytes * self.sample_rate

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> "SessionConfig":
        """Validate a parsed ``start`` message (``type`` already checked).

        Raises:
          ProtocolError: ``unsupported_version`` or ``bad_field`` with the offending field named.
        """
        if "version" in message:
            version = message["version"]
            if isinstance(version, bool) or version != PROTOCOL_VERSION:
                raise ProtocolError(
                    "unsupported_version", f"protocol version {_short(repr(version), 20)} is not supported (this server speaks {PROTOCOL_VERSION})"
                )
        encoding = message.get("encoding", "pcm_s16le")
        if encoding not in ENCODINGS:
            raise ProtocolError("bad_field", f"encoding must be one of {', '.join(ENCODINGS)}, got {_short(repr(encoding), 40)}")
        language = message.get("language")
        if language is not None:
            if not isinstance(language, str) or not 0 < len(language) <= MAX_LANGUAGE_CHARS or not language.replace("-", "").isalpha():
                raise ProtocolError("bad_field", "language must be null or a language code such as \"en\"")
            language = language.lower()
        hotwords = message.get("hotwords", [])
        if hotwords is None:
            hotwords = []
        if not isinstance(hotwords, list) or len(hotwords) > MAX_HOTWORDS:
            raise ProtocolError("bad_field", f"hotwords must be an array of at most {MAX_HOTWORDS} strings")
        for word in hotwords:
            if not isinstance(word, str) or not word.strip() or len(word) > MAX_HOTWORD_CHARS:
                raise ProtocolError("bad_field", f"each hotword must be a non-empty string of at most {MAX_HOTWORD_CHARS} characters")
        return cls(
            sample_rate=_int_field(message, "sample_rate", 16000, MIN_SAMPLE_RATE, MAX_SAMPLE_RATE),
            encoding=encoding,
            channels=_int_field(message, "channels", 1, 1, MAX_CHANNELS),
            language=language,
            hotwords=tuple(w.strip() for w in hotwords),
            partials=_bool_field(message, "partials", True),
            chunk_seconds=_float_field(message, "chunk", None, MIN_CHUNK_SECONDS, MAX_CHUNK_SECONDS),
            realtime=_bool_field(message, "realtime", True),
            ignored=tuple(sorted(k for k in message if k not in START_FIELDS)),
        )


# ------------------------------------------------------------------------------------ audio
def decode_audio(data: bytes, config: SessionConfig) -> np.ndarray:
    """A binary frame -> ``(frames, channels)`` (or ``(frames,)`` for mono) samples.

    ``pcm_s16le`` stays int16 (the ring buffer scales it); ``f32le`` must be finite and is
    clipped to [-1, 1] so that garbage cannot reach the model at absurd levels.

    Raises:
      ProtocolError: ``bad_audio`` for a byte count that is not whole sample frames or for
        non-finite floats.
    """
    n = len(data)
    if n % config.frame_bytes:
        raise ProtocolError(
            "bad_audio",
            f"an audio frame must hold whole sample frames of {config.frame_bytes} bytes "
            f"({config.encoding}, {config.channels} channel(s)); got {n} bytes",
        )
    if config.encoding == "pcm_s16le":
        samples = np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)
    else:
        samples = np.frombuffer(data, dtype="<f4").astype(np.float32, copy=False)
        if not np.isfinite(samples).all():
            raise ProtocolError("bad_audio", "f32le audio contains NaN or infinite samples")
        samples = np.clip(samples, -1.0, 1.0)
    if config.channels > 1:
        samples = samples.reshape(-1, config.channels)
    return samples


# ---------------------------------------------------------------------------- server messages
def dumps(message: dict[str, Any]) -> str:
    """JSON text of any server message (``ensure_ascii=False``: UTF-8 words stay readable)."""
    return json.dumps(message, ensure_ascii=False, separators=(", ", ": "))
