"""Headless Chromium with a fake microphone, driven over the DevTools protocol (browser tests).

``HeadlessChromium`` starts Debian's ``chromium`` with a WAV file as the microphone
(``--use-file-for-fake-audio-capture``; Chromium delivers it in real time at 44.1 kHz whatever
the file's rate), opens a page and returns a ``DevToolsPage``: ``evaluate`` JavaScript,
``wait_for`` a condition, ``screenshot``. The DevTools client is a few lines over ``websockets``
(no Playwright, no downloaded browser).

Notes (see ../shared/notes/environment.md): the WAV must be 16-bit PCM (a 24-bit file plays as
silence without any error); the flags keep Chromium off the network.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional, Union

from websockets.sync.client import ClientConnection, connect

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")

BASE_FLAGS = (
    "--headless",
    "--no-sandbox",  # we run as root in CI containers
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",  # grant the microphone without a prompt
    "--use-fake-device-for-media-stream",
    "--window-size=1100,700",
)


def find_chromium() -> Optional[str]:
    """Path of a Chromium binary, or ``None``."""
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class DevToolsError(RuntimeError):
    pass


class DevToolsPage:
    """A DevTools protocol connection to one page target.

    Args:
      ws_url: the page's ``webSocketDebuggerUrl``.
    """

    def __init__(self, ws_url: str) -> None:
        self._ws: ClientConnection = connect(ws_url, max_size=None, compression=None, open_timeout=20, legacy=True)
        self._ids = itertools.count(1)
        self.console: list[str] = []

    def call(self, method: str, params: Optional[dict[str, Any]] = None, timeout: float = 30.0) -> dict[str, Any]:
        """Send one command and return its result (events received meanwhile are kept)."""
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == call_id:
                if "error" in message:
                    raise DevToolsError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._on_event(message)

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("method") == "Runtime.consoleAPICalled":
            args = message["params"].get("args", [])
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
        elif message.get("method") == "Runtime.exceptionThrown":
            details = message["params"].get("exceptionDetails", {})
            self.console.append("exception: " + str(details.get("exception", {}).get("description", details.get("text"))))

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        """Evaluate JavaScript in the page and return its (JSON) value."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": await_promise})
        if "exceptionDetails" in result:
            raise DevToolsError(f"JavaScript error: {result['exceptionDetails'].get('text')}: {result.get('result', {}).get('description')}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, poll: float = 0.25) -> Any:
        """Poll ``expression`` until it is truthy; return its value (``TimeoutError`` if never)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for: {expression}")
            time.sleep(poll)

    def screenshot(self, path: Union[str, Path]) -> Path:
        """Save a PNG of the viewport."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self._ws.close()


class HeadlessChromium:
    """Chromium running headless with ``audio_file`` as its microphone (context manager).

    Args:
      audio_file: 16-bit PCM WAV used as the fake microphone (played once, in real time).
      binary: Chromium executable (default: found on ``PATH``).
      loop_audio: replay the file forever instead of once.
    """

    def __init__(self, audio_file: Union[str, Path, None] = None, *, binary: Optional[str] = None, loop_audio: bool = False) -> None:
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("chromium not found (Debian: apt install chromium fonts-liberation)")
        self.audio_file = Path(audio_file) if audio_file is not None else None
        self.loop_audio = loop_audio
        self._profile: Optional[tempfile.TemporaryDirectory] = None
        self._process: Optional[subprocess.Popen] = None
        self._stderr: list[str] = []
        self.port: Optional[int] = None

    def start(self, timeout: float = 60.0) -> "HeadlessChromium":
        self._profile = tempfile.TemporaryDirectory(prefix="burble-chromium-")
        flags = list(BASE_FLAGS) + [f"--user-data-dir={self._profile.name}", "--remote-debugging-port=0"]
        if self.audio_file is not None:
            suffix = "" if self.loop_audio else "%noloop"
            flags.append(f"--use-file-for-fake-audio-capture={self.audio_file}{suffix}")
        self._process = subprocess.Popen(
            [self.binary, *flags, "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "LANG": "C.UTF-8"},
        )  # fmt: skip
        found = threading.Event()

        def read_stderr() -> None:
            assert self._process is not None and self._process.stderr is not None
            for line in self._process.stderr:
                self._stderr.append(line.rstrip())
                match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
                if match:
                    self.port = int(match.group(1))
                    found.set()

        threading.Thread(target=read_stderr, daemon=True).start()
        if not found.wait(timeout):
            self.stop()
            raise RuntimeError("chromium did not start:\n" + "\n".join(self._stderr[-20:]))
        return self

    def open(self, url: str) -> DevToolsPage:
        """Open ``url`` in a new tab and connect to it."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?{url}", method="PUT")
        with urllib.request.urlopen(request, timeout=20) as response:
            target = json.loads(response.read())
        page = DevToolsPage(target["webSocketDebuggerUrl"])
        page.call("Runtime.enable")
        page.call("Page.enable")
        return page

    @property
    def log(self) -> str:
        return "\n".join(self._stderr)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None

    def __enter__(self) -> "HeadlessChromium":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
