"""The server's small parts: token and origin checks, metrics text, JSON logs,
the dialect table and the client's URL handling."""

from __future__ import annotations

import json
import logging

import pytest
from websockets.datastructures import Headers

from burble.streaming.client import ClientOptions, websocket_url
from burble.streaming.loop import PipelineMetrics
from burble.streaming.server import ServerOptions
from burble.streaming.server.dialects import websocket_routes
from burble.streaming.server.tts_session import TtsSession
from burble.streaming.server.logs import JsonFormatter, configure_logging
from burble.streaming.server.session import Session
from burble.streaming.server.vosk import VoskSession
from burble.streaming.server.metrics import ServerMetrics, prometheus_text
from burble.streaming.server.security import load_token, origin_allowed, presented_token, token_matches


def test_load_token(tmp_path):
    path = tmp_path / "token"
    path.write_text("  abc123  \nignored second line\n")
    assert load_token(path) == "abc123"
    path.write_text("\n \n")
    with pytest.raises(ValueError, match="empty"):
        load_token(path)
    with pytest.raises(FileNotFoundError):
        load_token(tmp_path / "missing")


def test_presented_token_and_compare():
    assert presented_token(Headers({"Authorization": "Bearer  xyz "}), "/ws") == "xyz"
    assert presented_token(Headers({"Authorization": "bearer xyz"}), "/ws?token=other") == "xyz"  # header wins
    assert presented_token(Headers({"Authorization": "Basic dXNlcg=="}), "/ws?token=q%20t") == "q t"
    assert presented_token(Headers(), "/ws") is None
    assert token_matches(None, None) and token_matches(None, "anything")  # auth off
    assert token_matches("s3cret", "s3cret")
    for wrong in (None, "", "s3cre", "s3cret ", "S3CRET", "s3cret\udcff"):
        assert not token_matches("s3cret", wrong)


@pytest.mark.parametrize(
    "origin, host, allowed, ok",
    [
        (None, "127.0.0.1:8765", (), True),  # not a browser
        ("http://127.0.0.1:8765", "127.0.0.1:8765", (), True),  # our own page
        ("http://127.0.0.1:8766", "127.0.0.1:8765", (), False),  # another local port
        ("https://evil.example", "127.0.0.1:8765", (), False),
        ("https://app.example", "127.0.0.1:8765", ("https://app.example/",), True),
        ("https://evil.example", "127.0.0.1:8765", ("*",), True),
        ("null", "127.0.0.1:8765", (), False),  # sandboxed frames and file:// pages
        ("file://", "", (), False),
    ],
)
def test_origin_allowed(origin, host, allowed, ok):
    assert origin_allowed(origin, host, allowed) is ok


def test_server_options_validation():
    with pytest.raises(ValueError):
        ServerOptions(allowed_origins=("evil.example",))
    with pytest.raises(ValueError):
        ServerOptions(token=" ")
    with pytest.raises(ValueError):
        ServerOptions(max_sessions=0)


def test_metrics_snapshot_and_prometheus_text():
    metrics = ServerMetrics()
    metrics.sessions_total = 3
    metrics.rejected["auth"] += 2
    metrics.errors["bad_audio"] += 1
    metrics.closes[1000] += 2
    metrics.events["final"] += 7
    metrics.add_session(PipelineMetrics(audio_seconds=10.0, recognizer_seconds=4.0, dropped_seconds=0.5))
    live = PipelineMetrics(audio_seconds=10.0, recognizer_seconds=1.0, lag_seconds=0.5, max_lag_seconds=1.25)
    snap = metrics.snapshot({"s-1": live}, sessions_active=1, compute_running=1, compute_waiting=0)
    assert snap["audio_seconds"] == 20.0 and snap["rtf"] == 0.25 and snap["max_lag_seconds"] == 1.25
    assert snap["lag_seconds"] == 0.5 and snap["session_lag_seconds"] == {"s-1": 0.5}
    text = prometheus_text(snap)
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert samples["burble_sessions_active"] == "1"
    assert samples['burble_rejected_total{reason="auth"}'] == "2"
    assert samples['burble_closes_total{code="1000"}'] == "2"
    assert samples["burble_real_time_factor"] == "0.25"
    assert samples["burble_dropped_seconds_total"] == "0.5"
    assert samples['burble_lag_seconds{session="s-1"}'] == "0.5"
    assert all(line.startswith(("# HELP burble_", "# TYPE burble_")) for line in text.splitlines() if line.startswith("#"))


def test_json_log_lines():
    record = logging.LogRecord("burble.server", logging.WARNING, __file__, 1, "session %s ended", ("a-1",), None)
    record.event, record.session, record.codes = "session_end", "a-1", [1, 2]
    line = JsonFormatter().format(record)
    data = json.loads(line)
    assert data["message"] == "session a-1 ended" and data["level"] == "warning" and data["logger"] == "burble.server"
    assert data["event"] == "session_end" and data["session"] == "a-1" and data["codes"] == "[1, 2]"
    assert data["time"].endswith("Z") and "\n" not in line


def test_library_warnings_become_json_log_lines(capsys):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("json")
        import warnings

        warnings.warn("a library complains", UserWarning)
        logging.getLogger("burble.server").info("hello", extra={"event": "x"})
    finally:
        logging.captureWarnings(False)
        root.handlers[:], level = saved
        root.setLevel(level)
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON, the warning included
    assert [r["logger"] for r in records] == ["py.warnings", "burble.server"]
    assert "a library complains" in records[0]["message"]


def test_dialect_table():
    assert websocket_routes("burble") == {"/ws": Session, "/vosk": VoskSession, "/": Session, "/tts": TtsSession}
    assert websocket_routes("vosk") == {"/ws": Session, "/vosk": VoskSession, "/": VoskSession, "/tts": TtsSession}
    with pytest.raises(ValueError, match="unknown dialect"):
        websocket_routes("kaldi")


@pytest.mark.parametrize(
    "url, endpoint",
    [
        ("ws://127.0.0.1:8765/", "ws://127.0.0.1:8765/ws"),  # the README's base URL
        ("ws://127.0.0.1:8765", "ws://127.0.0.1:8765/ws"),
        ("http://127.0.0.1:8765/", "ws://127.0.0.1:8765/ws"),  # the page URL serve prints
        ("https://asr.example/", "wss://asr.example/ws"),
        ("ws://127.0.0.1:8765/ws", "ws://127.0.0.1:8765/ws"),
        ("ws://h:1/?token=t", "ws://h:1/ws?token=t"),
        ("ws://h:1/vosk", "ws://h:1/vosk"),  # an explicit path is the user's choice
        ("ws://[::1]:8765/", "ws://[::1]:8765/ws"),
    ],
)
def test_websocket_url(url, endpoint):
    assert websocket_url(url) == endpoint
    assert ClientOptions(url=url).endpoint == endpoint


@pytest.mark.parametrize("url", ["127.0.0.1:8765", "ftp://h/", "ws://h:99999/", "ws://:80/", ""])
def test_bad_urls_are_bad_arguments(url):
    with pytest.raises(ValueError):
        ClientOptions(url=url)
