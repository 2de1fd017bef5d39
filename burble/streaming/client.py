"""Python client for the burble streaming ASR server (protocol v1, docs/protocol.md).

Low level, ``StreamingClient``: connect (``start`` -> ``ready``), send audio, ``stop``, iterate
events. High level, ``stream_audio`` / ``stream_file``: send a recording paced in real time (or
as fast as the server takes it) while receiving, and return every event.

Example::

    from burble.streaming.client import ClientOptions, stream_file

    events = stream_file("speech.wav", ClientOptions(url="ws://127.0.0.1:8765/"))
    print("".join(e.text for e in events if e.type == "final"))

The URL may be the server's base URL (``ws://host:port/`` or the page's ``http://host:port/``):
the client connects to its ``/ws`` endpoint (``websocket_url``).

Events are ``StreamEvent``s, the same objects (and, via ``to_json``, the same JSON lines) that
``burble stream --json`` produces.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional, Union
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from burble.audio.pcm import to_float32, to_pcm16
from burble.streaming.events import EVENT_TYPES, StreamEvent

EventCallback = Callable[[StreamEvent], None]

BURBLE_PATH = "/ws"  # the server's burble-protocol endpoint (docs/protocol.md)
_SCHEMES = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}
_CLOSE_NORMAL = 1000


def websocket_url(url: str) -> str:
    """The burble endpoint of ``url``: a base URL (no path, or ``/``) gets ``/ws``, and the
    page's ``http(s)://`` becomes ``ws(s)://``; any other path and the query stay as given.

    Raises:
      ValueError: for a URL that names no host or has another scheme.
    """
    parts = urlsplit(url.strip())
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None or not parts.hostname:
        raise ValueError(f"{url!r} is not a server URL (expected ws://HOST:PORT/, as 'burble serve' prints)")
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number in range)
    except ValueError:
        raise ValueError(f"{url!r} has a bad port") from None
    path = parts.path if parts.path not in ("", "/") else BURBLE_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


@dataclass(frozen=True)
class ClientOptions:
    """How to connect and stream.

    Attributes:
      url: the server, e.g. ``ws://127.0.0.1:8765/`` (its base URL: the client uses ``/ws``)
        or the endpoint itself, ``ws://127.0.0.1:8765/ws``.
      token: bearer token (sent in the ``Authorization`` header), if the server wants one.
      encoding: ``pcm_s16le`` (half the bytes) or ``f32le``.
      partials: ask for ``partial`` events.
      chunk_seconds: recognizer step, ``None`` for the server default.
      language: language code for multilingual models.
      hotwords: words to favour (if the server's recognizer supports biasing).
      realtime: pace audio like a live capture; False sends as fast as the server accepts.
      speed: with ``realtime``, send this many times faster than real time.
      frame_seconds: audio per binary frame.
      open_timeout: seconds to wait for the connection and ``ready``.
    """

    url: str = "ws://127.0.0.1:8765/ws"
    token: Optional[str] = None
    encoding: str = "pcm_s16le"
    partials: bool = True
    chunk_seconds: Optional[float] = None
    language: Optional[str] = None
    hotwords: tuple[str, ...] = ()
    realtime: bool = True
    speed: float = 1.0
    frame_seconds: float = 0.1
    open_timeout: float = 10.0

    def __post_init__(self) -> None:
        websocket_url(self.url)  # a bad URL is a bad argument, said before anything connects
        if self.encoding not in ("pcm_s16le", "f32le"):
            raise ValueError("encoding must be pcm_s16le or f32le")
        if self.speed <= 0 or self.frame_seconds <= 0:
            raise ValueError("speed and frame_seconds must be > 0")


    @property
    def endpoint(self) -> str:
        """The WebSocket URL the client connects to (``websocket_url(url)``)."""
        return websocket_url(self.url)


class ServerError(Exception):
    """The server sent an ``error`` message, refused the connection, or closed it unfinished.

    Attributes:
      code: the protocol's error code (``bad_audio``, ``server_busy``, ...).
      message: the server's explanation.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def encode_audio(samples: np.ndarray, encoding: str) -> bytes:
    """Mono or ``(frames, channels)`` float/int16 samples -> the bytes of one binary frame."""
    if encoding == "pcm_s16le":
        return to_pcm16(samples).astype("<i2", copy=False).tobytes()
    return to_float32(samples).astype("<f4", copy=False).tobytes()


class StreamingClient:
    """One streaming session (async context manager).

    Args:
      options: connection and stream options.
      sample_rate: rate of the audio you will send.
      channels: interleaved channels per frame of audio you will send.

    Example::

        async with StreamingClient(options, sample_rate=16000) as client:
            await client.send_audio(samples)
            await client.stop()
            async for event in client.events():
                ...
    """

    def __init__(self, options: ClientOptions = ClientOptions(), *, sample_rate: int = 16000, channels: int = 1) -> None:
        self.options = options
        self.sample_rate = int(sample_rate)
        self.channels = int(channels)
        self.ready: Optional[dict[str, Any]] = None
        self.connection: Optional[ClientConnection] = None

    @property
    def close_code(self) -> Optional[int]:
        return self.connection.close_code if self.connection is not None else None

    def start_message(self) -> dict[str, Any]:
        o = self.options
        message: dict[str, Any] = {
            "type": "start",
            "version": 1,
            "sample_rate": self.sample_rate,
            "encoding": o.encoding,
            "channels": self.channels,
            "partials": o.partials,
            "realtime": o.realtime,
        }
        if o.language is not None:
            message["language"] = o.language
        if o.hotwords:
            message["hotwords"] = list(o.hotwords)
        if o.chunk_seconds is not None:
            message["chunk"] = o.chunk_seconds
        return message

    async def connect(self) -> dict[str, Any]:
        """Open the connection, send ``start``, return the server's ``ready`` message.

        Raises:
          ServerError: the server refused (busy, bad token, no such endpoint, bad start ...).
          OSError, TimeoutError, websockets.exceptions.WebSocketException: no server answered
            (refused, unresolvable host, timeout, not a WebSocket server).
        """
        headers = {"Authorization": f"Bearer {self.options.token}"} if self.options.token else None
        endpoint = self.options.endpoint
        try:
            self.connection = await connect(
                endpoint, additional_headers=headers, compression=None, open_timeout=self.options.open_timeout, max_size=None
            )
        except InvalidStatus as e:
            status = e.response.status_code
            if status == 401:
                raise ServerError("unauthorized", "the server wants a valid token") from e
            if status == 403:
                raise ServerError("forbidden", "the server refused this origin") from e
            if status == 404:
                raise ServerError("not_found", f"no WebSocket endpoint at {endpoint} (HTTP 404); burble serves ws://HOST:PORT/ws") from e
            raise ServerError("refused", f"{endpoint} answered HTTP {status} instead of opening a WebSocket") from e
        await self.connection.send(json.dumps(self.start_message()))
        message = await asyncio.wait_for(self._recv_json(), self.options.open_timeout)
        if message is None:
            raise ServerError("closed", f"the server closed the connection (code {self.close_code})")
        if message.get("type") != "ready":
            raise ServerError(str(message.get("code", "unexpected")), str(message.get("message", message)))
        self.ready = message
        return message

    async def _recv_json(self) -> Optional[dict[str, Any]]:
        assert self.connection is not None
        try:
            text = await self.connection.recv()
        except ConnectionClosed:
            return None
        if isinstance(text, bytes):
            raise ServerError("unexpected", "the server sent binary data")
        try:
            message = json.loads(text)
        except ValueError:
            raise ServerError("unexpected", "the server sent a message that is not JSON (not a burble endpoint?)") from None
        if not isinstance(message, dict):
            raise ServerError("unexpected", "the server sent JSON that is not an object (not a burble endpoint?)")
        return message

    async def send_audio(self, samples: np.ndarray) -> None:
        """Send one frame of audio (float in [-1, 1] or int16; mono or ``(frames, channels)``)."""
        assert self.connection is not None, "connect() first"
        await self.connection.send(encode_audio(samples, self.options.encoding))

    async def stop(self) -> None:
        """No more audio: the server flushes its finals and closes."""
        assert self.connection is not None
        try:
            await self.connection.send(json.dumps({"type": "stop"}))
        except ConnectionClosed:
            pass

    async def events(self) -> AsyncIterator[StreamEvent]:
        """Events until the server closes the connection.

        Raises:
          ServerError: when the server sends an ``error`` (after the events before it), or
            closes the connection other than normally (1000: every final was sent).
        """
        while True:
            message = await self._recv_json()
            if message is None:
                if self.close_code != _CLOSE_NORMAL:
                    raise ServerError("closed", f"the server closed the connection before the end (code {self.close_code})")
                return
            kind = message.get("type")
            if kind in EVENT_TYPES:
                yield StreamEvent.from_dict(message)
            elif kind == "error":
                raise ServerError(str(message.get("code")), str(message.get("message")))

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()

    async def __aenter__(self) -> "StreamingClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def stream_audio(
    audio: np.ndarray,
    sample_rate: int,
    options: ClientOptions = ClientOptions(),
    *,
    on_event: Optional[EventCallback] = None,
) -> list[StreamEvent]:
    """Stream a recording to the server and collect its events (sending and receiving overlap).

    Args:
      audio: mono or ``(frames, channels)`` samples, float in [-1, 1] or int16.
      sample_rate: rate of ``audio`` (the server resamples).
      options: connection and pacing.
      on_event: called with each event as it arrives (e.g. print it).

    Raises:
      ServerError: the server refused the session or ended it with an error.
    """
    audio = np.asarray(audio)
    channels = 1 if audio.ndim == 1 else audio.shape[1]
    frame = max(1, int(round(options.frame_seconds * sample_rate)))
    events: list[StreamEvent] = []
    async with StreamingClient(options, sample_rate=sample_rate, channels=channels) as client:

        async def send() -> None:
            t0 = time.monotonic()
            for i in range(0, len(audio), frame):
                piece = audio[i : i + frame]
                if options.realtime:
                    # A live capture delivers a frame once its last sample was recorded.
                    due = t0 + (i + len(piece)) / sample_rate / options.speed
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                await client.send_audio(piece)
            await client.stop()

        sender = asyncio.create_task(send())
        try:
            async for event in client.events():
                events.append(event)
                if on_event is not None:
                    on_event(event)
        finally:
            if not sender.done():
                sender.cancel()
            results = await asyncio.gather(sender, return_exceptions=True)
        error = results[0]
        if isinstance(error, BaseException) and not isinstance(error, (asyncio.CancelledError, ConnectionClosed)):
            raise error
    return events


def read_audio_file(path: Union[str, Path]) -> tuple[np.ndarray, int]:
    """A file at its own rate and channel count (the server resamples and down-mixes)."""
    import soundfile

    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return (data[:, 0] if data.shape[1] == 1 else data), int(rate)


def stream_file(path: Union[str, Path], options: ClientOptions = ClientOptions(), *, on_event: Optional[EventCallback] = None) -> list[StreamEvent]:
    """Synchronous ``stream_audio`` of an audio file (anything soundfile reads)."""
    audio, rate = read_audio_file(path)
    return asyncio.run(stream_audio(audio, rate, options, on_event=on_event))


def final_text(events: list[StreamEvent]) -> str:
    """The committed transcript: the text of every ``final`` event, in order."""
    return "".join(e.text for e in events if e.type == "final").strip()

