"""``burble client`` and ``burble serve`` as processes (the CLI users run)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from websockets.sync.server import ServerConnection, serve

from burble.streaming.events import StreamEvent
from burble.testing.dev_audio import dev_item, require_shared
from burble.testing.server import ServerThread, options_for_tests, wait_until_listening
from server_helpers import FakeFactory, open_session, pcm16, read_until_closed

REPO = Path(__file__).resolve().parents[3]


def burble(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burble", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_that_drops_sessions() -> Iterator[str]:
    """A WebSocket server that answers ``start`` with ``ready``, then drops the TCP connection
    without a close frame (what a crashed or killed server looks like to a client)."""

    def handler(ws: ServerConnection) -> None:
        ws.recv()
        ws.send(json.dumps({"type": "ready", "version": 1}))
        ws.recv()  # the first audio frame
        ws.socket.shutdown(socket.SHUT_RDWR)

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/"
        server.shutdown()


def test_client_failures_are_one_line_and_an_exit_status(tmp_path):
    """`burble client --help` promises: 1 server error or unreachable, 2 bad arguments; each
    failure is one line on stderr, never a traceback."""
    require_shared("dev-audio")
    wav = str(dev_item("ls_1089-134686-0001").audio_path)
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x24\x00\x00\x00WAVEjunk")
    limited = ServerThread(FakeFactory(), options_for_tests(max_session_seconds=0.5))
    with ServerThread(FakeFactory(), options_for_tests()) as server, limited, server_that_drops_sessions() as dropping:
        base = f"ws://127.0.0.1:{server.port}/"
        cases = [
            # (arguments, exit status, what stderr must say)
            ((wav, "--url", base, "--fast"), 0, None),  # the README's base URL works
            ((wav, "--url", base + "nope", "--fast"), 1, "404"),
            ((wav, "--url", f"ws://127.0.0.1:{free_port()}/", "--fast"), 1, "cannot reach"),
            ((wav, "--url", "127.0.0.1:8765"), 2, "not a server URL"),
            ((wav, "--url", f"ws://127.0.0.1:{limited.port}/"), 1, "session_too_long"),  # the server ends it
            ((wav, "--url", dropping, "--fast"), 1, "closed the connection"),
            ((str(tmp_path / "missing.wav"), "--url", base), 2, "no such file"),
            ((str(corrupt), "--url", base), 2, "cannot read"),
        ]
        for args, status, says in cases:
            result = burble("client", *args)
            assert result.returncode == status, (args, result.stderr)
            assert "Traceback" not in result.stderr, (args, result.stderr)
            if says is None:
                assert result.stdout and not result.stderr, (args, result.stderr)
            else:
                assert len(result.stderr.splitlines()) == 1 and says in result.stderr, (args, result.stderr)
        assert server.wait_idle() and limited.wait_idle()


def test_client_prints_stream_json_lines(tmp_path):
    require_shared("dev-audio")
    wav = dev_item("ls_1089-134686-0001").audio_path
    with ServerThread(FakeFactory(), options_for_tests()) as server:
        result = burble("client", str(wav), "--url", server.url, "--json", "--fast")
        assert server.wait_idle()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    events = [StreamEvent.from_json(line) for line in lines]
    # Exactly the JSON lines `burble stream --json` writes (JsonLinesSink: to_json per event).
    assert [e.to_json() for e in events] == lines
    assert {e.type for e in events} == {"partial", "final", "endpoint"} and events[-1].type == "endpoint"


@pytest.mark.slow  # five process starts (each imports torch through the burble package)
def test_client_captions_and_errors(tmp_path):
    require_shared("dev-audio")
    wav = dev_item("ls_1089-134686-0001").audio_path
    token = tmp_path / "token"
    token.write_text("right-token\n")
    with ServerThread(FakeFactory(), options_for_tests(token="right-token")) as server:
        result = burble("client", str(wav), "--url", server.url, "--fast")
        assert result.returncode == 1 and "unauthorized" in result.stderr
        # Without --json into a pipe: one readable line per event, like `burble stream FILE`.
        result = burble("client", str(wav), "--url", server.url, "--fast", "--token-file", str(token))
        assert result.returncode == 0 and "{" not in result.stdout
        lines = result.stdout.splitlines()
        assert lines and all(line.startswith("emitted") for line in lines) and "endpoint" in lines[-1]
    result = burble("client", str(tmp_path / "missing.wav"), "--url", "ws://127.0.0.1:9/ws")
    assert result.returncode == 2 and "missing.wav" in result.stderr
    result = burble("client", str(wav), "--url", "ws://127.0.0.1:9/ws", "--fast")
    assert result.returncode == 1 and "cannot reach" in result.stderr


@pytest.mark.slow
def test_serve_sigterm_flushes_finals_and_exits(tmp_path):
    """`burble serve` with the real model: SIGTERM mid-stream -> finals, going-away, exit 0."""
    require_shared("dev-audio")
    audio = dev_item("ls_1089-134691-0001").load()
    token = tmp_path / "token"
    token.write_text("t0k3n")
    os.chmod(token, 0o600)
    process = subprocess.Popen(
        [sys.executable, "-m", "burble", "serve", "--port", "0", "--token-file", str(token), "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        url, logs = wait_until_listening(process, timeout=180)
        ws, ready = open_session(url, {"realtime": False}, additional_headers={"Authorization": "Bearer t0k3n"})
        for i in range(0, int(3.0 * 16000), 1600):
            ws.send(pcm16(audio[i : i + 1600]))
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        messages, code = read_until_closed(ws, timeout=120)
        ws.close()
        assert process.wait(120) == 0
        logs += process.stderr.readlines()
        assert process.stdout.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 1001
    assert messages[-1]["code"] == "shutting_down"
    finals = "".join(m["text"] for m in messages if m["type"] == "final").lower()
    assert "full hour" in finals
    records = [json.loads(line) for line in logs if line.strip()]  # --log-format json: nothing but JSON
    events = [r.get("event") for r in records]
    assert {"signal", "session_start", "session_end", "stopped"} <= set(events)
    assert events.index("warmed_up") < events.index("listening")  # warmed before it says it listens
