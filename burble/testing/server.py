"""Run an ``AsrServer`` in a background thread for tests and benchmarks.

The server gets its own event loop in a daemon thread, so a test can talk to it with blocking
clients (``websockets.sync.client``) or with ``asyncio.run`` of the async client, over a real
loopback connection on a free port.

Example::

    with ServerThread(factory, ServerOptions(port=0)) as server:
        events = stream_file(path, ClientOptions(url=server.url))
        server.wait_idle()   # every session has ended and unregistered
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future
from typing import Any, Awaitable, Callable, Optional, TypeVar

from burble.streaming.server import AsrServer, RecognizerFactory, ServerOptions

T = TypeVar("T")


class ServerThread:
    """An ``AsrServer`` serving from a daemon thread (context manager).

    Args:
      factory: the recognizer factory.
      options: server options; ``port=0`` (the default here) picks a free port.
    """

    def __init__(self, factory: RecognizerFactory, options: Optional[ServerOptions] = None, *,
                 voice: Optional[Callable[[], Any]] = None) -> None:
        options = options or ServerOptions(port=0)
        self.server = AsrServer(factory, options, voice=voice)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="burble-test-server", daemon=True)
        self._started = threading.Event()
        self._error: Optional[BaseException] = None
        self._stopping: Optional[asyncio.Event] = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stopping = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as e:  # report bind errors to the starting thread
                self._error = e
                self._started.set()
                return
            self._started.set()
            await self._stopping.wait()
            await self.server.shutdown()

        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def start(self) -> "ServerThread":
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful shutdown (as on SIGTERM) and join the thread."""
        if self._thread.is_alive() and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --------------------------------------------------------------------------------- access
    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run a coroutine on the server's loop and wait for its result."""
        future: Future = asyncio.run_coroutine_threadsafe(fn(), self._loop)
        return future.result(timeout)

    def session_count(self) -> int:
        return self.call(self._count)

    async def _count(self) -> int:
        return len(self.server.sessions)

    def task_count(self) -> int:
        """asyncio tasks alive on the server's loop (a leak check: compare before and after)."""

        async def count() -> int:
            return len(asyncio.all_tasks())

        return self.call(count)

    def snapshot(self) -> dict:
        async def snap() -> dict:
            return self.server.snapshot()

        return self.call(snap)

    def wait_idle(self, timeout: float = 20.0) -> bool:
        """Wait until no session is open; ``True`` if that happened within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.session_count() == 0:
                return True
            time.sleep(0.05)
        return False

    def get(self, path: str, headers: Optional[dict[str, str]] = None) -> tuple[int, bytes, dict[str, str]]:
        """Plain HTTP GET against the server: ``(status, body, headers)`` (errors included)."""
        request = urllib.request.Request(self.http_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)


def options_for_tests(**overrides: Any) -> ServerOptions:
    """``ServerOptions`` on a free port, with the given fields replaced."""
    return dataclasses.replace(ServerOptions(port=0), **overrides)


def wait_until_listening(process: "subprocess.Popen[str]", timeout: float) -> tuple[str, list[str]]:
    """The WebSocket URL of a ``burble serve --log-format json`` subprocess, read from its stderr's
    ``listening`` record, and the log lines up to it; an ``AssertionError`` with the logs if it
    does not come in ``timeout`` s."""
    logs: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()  # type: ignore[union-attr]
        if not line:
            break  # the server exited
        logs.append(line)
        if line.startswith("{") and json.loads(line).get("event") == "listening":
            return json.loads(line)["url"], logs
    raise AssertionError("burble serve did not start listening:\n" + "".join(logs))
