"""Bad and hostile clients: each gets a clear error or a clean close; everyone else is served.

Every test runs a well-behaved real-time session alongside (``Bystander``) and checks at the end
that it got its results, that the session count returned to zero and that no task leaked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from burble.streaming.client import ClientOptions, final_text, stream_audio
from burble.streaming.server.protocol import START_FIELDS
from burble.testing.server import ServerThread, options_for_tests
from server_helpers import FakeFactory, FloodFactory, errors, open_session, pcm16, read_until_closed

SR = 16000


class Bystander(threading.Thread):
    """A real-time session that runs while a test misbehaves; it must still get its results."""

    def __init__(self, url: str, audio: np.ndarray) -> None:
        super().__init__(daemon=True)
        self.url, self.audio = url, audio
        self.events: list = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            options = ClientOptions(url=self.url, realtime=True, speed=2.0)
            self.events = asyncio.run(stream_audio(self.audio, SR, options))
        except BaseException as e:  # reported by check()
            self.error = e

    def check(self) -> None:
        self.join(60)
        assert self.error is None, f"the bystander session failed: {self.error!r}"
        assert final_text(self.events), "the bystander session got no results"


@pytest.fixture
def guarded(speech):
    """A server plus a bystander session; after the test: bystander served, nothing leaked."""
    audio, _ = speech
    with ServerThread(FakeFactory(), options_for_tests()) as server:
        baseline = server.task_count()
        bystander = Bystander(server.url, audio[: int(1.2 * SR)])
        bystander.start()
        yield server
        bystander.check()
        assert server.wait_idle(), "sessions leaked"
        deadline = time.monotonic() + 5
        while server.task_count() > baseline and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.task_count() <= baseline, "tasks leaked"
        assert "internal" not in server.snapshot()["errors"]


def expect_error(server, messages_to_send, code, close_code, start=None):
    """Send ``messages_to_send`` (after ``start`` if given); expect one error and a close."""
    if start is not None:
        ws, ready = open_session(server.url, start)
        assert ready["type"] == "ready"
    else:
        ws = connect(server.url, legacy=True)
    with ws:
        for message in messages_to_send:
            ws.send(message)
        received, closed = read_until_closed(ws)
    assert errors(received) == [code], received
    assert received[-1]["type"] == "error" and received[-1]["message"]
    assert closed == close_code
    return received


@pytest.mark.parametrize(
    "text, code, close_code",
    [
        ("hello", "bad_json", 1007),
        ("{'type': 'start'}", "bad_json", 1007),
        ('{"type": "start", "sample_rate": NaN}', "bad_json", 1007),
        ('{"type": "start", "chunk": Infinity}', "bad_json", 1007),
        ("[]", "bad_message", 1008),
        ('{"kind": "start"}', "bad_message", 1008),
        ('{"type": "hello"}', "unknown_type", 1008),
        ('{"type": "stop"}', "not_started", 1008),
        ('{"type": "start", "sample_rate": "16k"}', "bad_field", 1008),
        ('{"type": "start", "sample_rate": 0}', "bad_field", 1008),
        ('{"type": "start", "sample_rate": 1e9}', "bad_field", 1008),
        ('{"type": "start", "sample_rate": -1}', "bad_field", 1008),
        ('{"type": "start", "channels": 1000}', "bad_field", 1008),
        ('{"type": "start", "encoding": "opus"}', "bad_field", 1008),
        ('{"type": "start", "partials": "no"}', "bad_field", 1008),
        ('{"type": "start", "version": 99}', "unsupported_version", 1008),
    ],
)
def test_bad_first_message(guarded, text, code, close_code):
    expect_error(guarded, [text], code, close_code)


def test_audio_before_start(guarded):
    expect_error(guarded, [pcm16(np.zeros(1600))], "not_started", 1008)


@pytest.mark.parametrize(
    "message, code, close_code",
    [
        ("not json", "bad_json", 1007),
        ('{"type": "pause"}', "unknown_type", 1008),
        ('{"type": "start"}', "already_started", 1008),
        ('{"type": ["stop"]}', "bad_message", 1008),
        (b"\x01\x02\x03", "bad_audio", 1007),
    ],
)
def test_bad_messages_after_start(guarded, speech, message, code, close_code):
    audio, _ = speech
    expect_error(guarded, [pcm16(audio[:8000]), message], code, close_code, start={})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_float_audio(guarded, bad):
    samples = np.zeros(1600, dtype="<f4")
    samples[100] = bad
    expect_error(guarded, [samples.tobytes()], "bad_audio", 1007, start={"encoding": "f32le"})


def test_odd_byte_counts(guarded):
    expect_error(guarded, [b"\x00" * 1601], "bad_audio", 1007, start={})
    expect_error(guarded, [b"\x00" * 1602], "bad_audio", 1007, start={"encoding": "f32le"})
    expect_error(guarded, [b"\x00" * 3204], "bad_audio", 1007, start={"channels": 2, "encoding": "f32le"})


def test_oversized_frame(guarded):
    ws, _ = open_session(guarded.url)
    with ws:
        ws.send(b"\x00" * (guarded.server.options.max_message_bytes + 2))
        _, closed = read_until_closed(ws)
    assert closed == 1009
    ws = connect(guarded.url, legacy=True)
    with ws:  # an oversized text message before start, too
        ws.send("x" * (guarded.server.options.max_message_bytes + 1))
        _, closed = read_until_closed(ws)
    assert closed == 1009


@pytest.mark.parametrize("how", ["tcp_reset", "close_frame"])
def test_client_vanishes_mid_utterance(guarded, speech, how):
    audio, _ = speech
    factory: FakeFactory = guarded.server.factory  # type: ignore[assignment]
    ws, _ = open_session(guarded.url, {"chunk": 0.2})
    for i in range(0, int(2.0 * SR), 1600):  # 2 s of speech in real time, then gone
        ws.send(pcm16(audio[i : i + 1600]))
        time.sleep(0.1)
    recognizer = next(r for r, c in zip(factory.created, factory.configs) if c.chunk_seconds == 0.2)
    if how == "tcp_reset":
        ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        ws.socket.close()  # RST, no close frame
    else:
        ws.close()  # a normal close but without "stop"
    deadline = time.monotonic() + 10
    while guarded.session_count() > 1 and time.monotonic() < deadline:  # the bystander may still run
        time.sleep(0.05)
    assert recognizer.calls, "the recognizer never ran"
    calls = len(recognizer.calls)
    time.sleep(0.5)
    assert len(recognizer.calls) == calls, "the recognizer kept running for a vanished client"
    assert ("flush",) not in recognizer.calls  # cancelled, not flushed: nobody is listening


def test_client_that_never_reads(speech):
    """A client that sends but never reads is dropped after the send timeout; others go on."""
    audio, _ = speech
    options = options_for_tests(send_timeout_seconds=1.0, vad=None)
    with ServerThread(FloodFactory(), options) as server:
        bystander = Bystander(server.url, audio)
        ws, _ = open_session(server.url, {"realtime": False, "chunk": 0.1}, max_queue=1)
        ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        bystander.start()
        t0 = time.monotonic()
        loud = pcm16(np.tile(audio, 3))
        try:
            for i in range(0, len(loud), 6400):  # ~30 s of audio as fast as the server takes it
                ws.send(loud[i : i + 6400])
        except (ConnectionClosed, OSError):
            pass
        # The session is gone without our ever reading a message.
        deadline = time.monotonic() + 20
        while server.snapshot()["errors"].get("client_too_slow", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.snapshot()["errors"].get("client_too_slow") == 1
        assert time.monotonic() - t0 < 20
        bystander.join(60)
        assert bystander.error is None and bystander.events  # flood partials still reached it
        ws.socket.close()
        assert server.wait_idle()


# --------------------------------------------------------------------------------- fuzzing
KEYS = ["type", "sample_rate", "encoding", "channels", "language", "hotwords", "partials", "chunk", "realtime", "version", "eof", "config", ""]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["start", "stop", "pcm_s16le", "f32le", "en", "", "../../etc/passwd", "$(reboot)"]),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
JSON_OBJECTS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6).map(json.dumps)
NON_FINITE = st.sampled_from(['{"type": "start", "sample_rate": NaN}', '{"type": "start", "chunk": -Infinity}', '{"type":"start","chunk":1e400}'])
VALID_START = st.builds(
    lambda rate, enc, ch: json.dumps({"type": "start", "sample_rate": rate, "encoding": enc, "channels": ch, "realtime": False}),
    st.sampled_from([8000, 16000, 44100, 48000]),
    st.sampled_from(["pcm_s16le", "f32le"]),
    st.integers(1, 3),
)
START_FUZZ = st.dictionaries(st.sampled_from(sorted(START_FIELDS - {"type"})), VALUES, min_size=1, max_size=4).map(lambda d: json.dumps({"type": "start", **d}))
TYPE_FUZZ = st.one_of(st.text(max_size=8), VALUES).map(lambda t: json.dumps({"type": t}))
TEXT = st.one_of(st.text(max_size=100), JSON_OBJECTS, START_FUZZ, TYPE_FUZZ, NON_FINITE, st.just('{"type": "stop"}'), VALID_START)
BINARY = st.one_of(
    st.binary(max_size=4000),
    st.integers(0, 2000).map(lambda n: np.random.default_rng(n).normal(0, 0.1, n).astype("<f4").tobytes()),
    st.integers(0, 4000).map(lambda n: (np.arange(n) % 200).astype("<i2").tobytes()),
)
SESSIONS = st.lists(st.one_of(TEXT, BINARY), min_size=1, max_size=14).map(lambda m: m)
FUZZ = st.one_of(SESSIONS, st.tuples(VALID_START, st.lists(st.one_of(TEXT, BINARY), max_size=14)).map(lambda t: [t[0], *t[1]]))


class ErrorLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def fuzz_server():
    handler = ErrorLogs()
    logging.getLogger("burble").addHandler(handler)
    with ServerThread(FakeFactory(), options_for_tests(vad=None, idle_timeout_seconds=5.0)) as server:
        server.sent = [0]  # type: ignore[attr-defined]
        yield server, handler
    logging.getLogger("burble").removeHandler(handler)


@settings(max_examples=350, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(messages=FUZZ)
def test_fuzz_random_and_malformed_messages(fuzz_server, messages):
    server, _ = fuzz_server
    ws = connect(server.url, legacy=True, open_timeout=10)
    with ws:
        for message in messages:
            try:
                ws.send(message)
                server.sent[0] += 1
            except ConnectionClosed:
                break
        # Whatever happened, the server answers only with well-formed protocol messages.
        try:
            while True:
                reply = json.loads(ws.recv(timeout=0.05))
                assert reply["type"] in ("ready", "partial", "final", "endpoint", "error")
                if reply["type"] == "error":
                    assert isinstance(reply["code"], str) and reply["message"]
        except (TimeoutError, ConnectionClosed):
            pass


def test_fuzz_left_the_server_healthy(fuzz_server, speech):
    """Runs after the fuzz test (same module server): no crash, no leak, still serving."""
    server, handler = fuzz_server
    assert server.sent[0] >= 1000, f"the fuzz test sent only {server.sent[0]} messages"
    print(f"fuzz: {server.sent[0]} messages sent, errors by code: {server.snapshot()['errors']}")
    assert server.wait_idle()
    assert not handler.records, [r.getMessage() for r in handler.records]
    snap = server.snapshot()
    assert "internal" not in snap["errors"] and snap["closes"].get("1011", 0) == 0
    audio, _ = speech
    events = asyncio.run(stream_audio(audio, SR, ClientOptions(url=server.url, realtime=False)))
    assert final_text(events)


def test_ten_thousand_hostile_messages_leave_an_honest_session_untouched(speech):
    """>= 10,000 fuzzed messages (hostile sessions back to back) while honest sessions stream the
    same audio over and over: each honest session's final text (a hash of the exact audio its
    recognizer received) equals the text it gets with no fuzzing, and the server stays healthy.
    (~30 s: 2,500 hypothesis examples sent ~14,600 messages here, beside ~500 honest sessions.)"""
    from hypothesis import Phase

    from server_helpers import ChecksumFactory

    audio, _ = speech
    handler = ErrorLogs()
    logging.getLogger("burble").addHandler(handler)
    try:
        with ServerThread(ChecksumFactory(), options_for_tests(vad=None, idle_timeout_seconds=5.0)) as server:
            options = ClientOptions(url=server.url, realtime=False)
            baseline = final_text(asyncio.run(stream_audio(audio, SR, options)))
            assert baseline.startswith(f"{len(audio)}:")  # every sample reached the recognizer
            done, honest_texts, honest_errors = threading.Event(), [], []

            def honest() -> None:
                while not done.is_set():
                    try:
                        honest_texts.append(final_text(asyncio.run(stream_audio(audio, SR, options))))
                    except BaseException as error:  # reported below
                        honest_errors.append(error)
                        return

            honest_thread = threading.Thread(target=honest, daemon=True)
            honest_thread.start()
            sent = [0]

            @settings(max_examples=2500, deadline=None, suppress_health_check=list(HealthCheck), database=None,
                      phases=[Phase.generate])
            @given(messages=FUZZ)
            def fuzz(messages: list) -> None:
                with connect(server.url, legacy=True, open_timeout=10) as ws:
                    for message in messages:
                        try:
                            ws.send(message)
                            sent[0] += 1
                        except ConnectionClosed:
                            break

            while sent[0] < 10_000:
                fuzz()
            done.set()
            honest_thread.join(60)
            assert not honest_errors, honest_errors
            assert len(honest_texts) >= 3 and set(honest_texts) == {baseline}
            assert server.wait_idle()
            snap = server.snapshot()
            assert "internal" not in snap["errors"] and snap["closes"].get("1011", 0) == 0
            print(f"fuzz: {sent[0]} messages, {len(honest_texts)} honest sessions, errors by code: {snap['errors']}")
    finally:
        logging.getLogger("burble").removeHandler(handler)
    assert not handler.records, [r.getMessage() for r in handler.records]


def test_the_checksum_recognizer_names_the_exact_audio(speech):
    """The fuzz test's yardstick: chunking does not change the text, one altered or missing sample does."""
    from server_helpers import ChecksumRecognizer

    audio, _ = speech

    def text(pieces: list[np.ndarray]) -> str:
        recognizer, start = ChecksumRecognizer(), 0
        for piece in pieces:
            recognizer.accept(piece, start)
            start += len(piece)
        return recognizer.flush()[0].text

    whole = text([audio])
    assert text(np.array_split(audio, 7)) == whole
    altered = audio.copy()
    altered[1000] += 1e-4
    assert text([altered]) != whole
    assert text([audio[:-1]]) != whole
