"""The server over real loopback connections (fake recognizer, real VAD and pipeline)."""

from __future__ import annotations

import asyncio
import json
import time
import wave
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from websockets.asyncio.client import connect as async_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from burble.streaming.client import ClientOptions, ServerError, StreamingClient, final_text, stream_audio
from burble.testing.server import ServerThread, options_for_tests
from server_helpers import FakeFactory, errors, open_session, pcm16, read_until_closed

SR = 16000


def frames(audio: np.ndarray, seconds: float = 0.1) -> list[bytes]:
    n = int(seconds * SR)
    return [pcm16(audio[i : i + n]) for i in range(0, len(audio), n)]


def test_happy_path_python_client(server, fake_factory, speech):
    audio, sr = speech
    events = asyncio.run(stream_audio(audio, sr, ClientOptions(url=server.url, realtime=False)))
    kinds = [e.type for e in events]
    assert "final" in kinds and kinds[-1] == "endpoint"
    # Every word the (fake) recognizer made tentative was committed by the end.
    finals = {w.word for e in events if e.type == "final" for w in e.words}
    partials = {w.word for e in events if e.type == "partial" for w in e.words}
    assert partials <= finals and finals
    assert fake_factory.created[0].accepted_samples > 0
    assert server.wait_idle()
    snap = server.snapshot()
    assert snap["sessions_total"] == 1 and snap["closes"] == {"1000": 1}
    assert abs(snap["audio_seconds"] - len(audio) / sr) < 0.1
    assert snap["events"]["final"] == sum(k == "final" for k in kinds)


def gated_by_vad(accepted_samples: int, speech_samples: int) -> bool:
    """The recognizer got the speech, but not the silence around it: at most the speech plus
    the VAD's pre-roll (0.3 s) and hangover (0.2 s) and half a second of slack."""
    return speech_samples // 2 <= accepted_samples <= speech_samples + SR


def stream_speech_in_silence(server: ServerThread, speech: np.ndarray) -> None:
    silence = np.zeros(2 * SR, dtype=np.float32)
    padded = np.concatenate([silence, speech, silence])  # 4 s of silence the VAD must hold back
    asyncio.run(stream_audio(padded, SR, ClientOptions(url=server.url, realtime=False)))
    assert server.wait_idle()


def test_vad_keeps_silence_from_the_recognizer(server, fake_factory, speech):
    audio, _ = speech
    stream_speech_in_silence(server, audio)
    assert gated_by_vad(fake_factory.created[0].accepted_samples, len(audio))
    # Negative control: without the VAD the recognizer gets the silence too and the check fails.
    ungated = FakeFactory()
    with ServerThread(ungated, options_for_tests(vad=None)) as plain:
        stream_speech_in_silence(plain, audio)
    assert ungated.created[0].accepted_samples == len(audio) + 4 * SR
    assert not gated_by_vad(ungated.created[0].accepted_samples, len(audio))


def test_warms_up_before_listening():
    class Probe(FakeFactory):
        bound_during_warm_up: Optional[bool] = None

        def warm_up(self) -> None:
            super().warm_up()
            try:
                thread.server.port  # raises until the server has bound its socket
                self.bound_during_warm_up = True
            except RuntimeError:
                self.bound_during_warm_up = False

    probe = Probe()
    thread = ServerThread(probe, options_for_tests())
    with thread:
        assert probe.warm_ups == 1 and probe.bound_during_warm_up is False
        assert not probe.created  # warm_up is the factory's business: no session recognizer made


def test_client_takes_the_base_url(server, speech):
    """`burble client --url ws://HOST:PORT/` (the README's form) and the page's http:// URL."""
    audio, sr = speech
    for url in (f"ws://127.0.0.1:{server.port}/", f"ws://127.0.0.1:{server.port}", server.http_url + "/"):
        events = asyncio.run(stream_audio(audio[: int(1.5 * sr)], sr, ClientOptions(url=url, realtime=False)))
        assert final_text(events), url
    # The root itself speaks the burble protocol by default (a client that does not add /ws).
    ws, ready = open_session(f"ws://127.0.0.1:{server.port}/")
    ws.close()
    assert ready["type"] == "ready"


def test_ready_reports_options(server, fake_factory):
    ws, ready = open_session(server.url, {"hotwords": ["burble"], "language": "de", "chunk": 0.5, "partials": False, "extra": 1})
    with ws:
        assert ready["type"] == "ready" and ready["version"] == 1 and ready["model"] == "fake"
        assert ready["unsupported"] == ["hotwords", "language"]
        assert ready["ignored"] == ["extra"]
        assert ready["chunk"] == 0.5 and ready["partials"] is False
        assert ready["limits"]["max_message_bytes"] == server.server.options.max_message_bytes
    assert fake_factory.configs[0].hotwords == ("burble",)


def test_stop_mid_utterance_flushes_every_final(server, fake_factory, speech):
    audio, _ = speech
    ws, _ = open_session(server.url, {"realtime": False, "chunk": 0.3})
    with ws:
        for frame in frames(audio[: int(1.6 * SR)]):  # stop in the middle of the sentence
            ws.send(frame)
        ws.send(json.dumps({"type": "stop"}))
        messages, code = read_until_closed(ws)
    assert code == 1000
    events = [m for m in messages if m["type"] in ("partial", "final", "endpoint")]
    assert events and events[-1]["type"] == "endpoint"
    assert not errors(messages)
    recognizer = fake_factory.created[0]
    assert ("flush",) in recognizer.calls or any(c[0] == "endpoint" for c in recognizer.calls)
    # The finals cover all the audio the recognizer accepted (nothing left tentative).
    last_accept = max(start + n for kind, start, n in (c for c in recognizer.calls if c[0] == "accept"))
    final_end = max(w["end"] for m in events if m["type"] == "final" for w in m["words"])
    assert final_end == pytest.approx(last_accept / SR, abs=1e-3)


def test_partials_can_be_turned_off(server, speech):
    audio, sr = speech
    events = asyncio.run(stream_audio(audio, sr, ClientOptions(url=server.url, realtime=False, partials=False)))
    assert events and not any(e.type == "partial" for e in events)


def test_realtime_client_and_stereo_44k(server, speech):
    """A real-time client at 44.1 kHz stereo f32: the server resamples and down-mixes."""
    audio, sr = speech
    from burble.audio.resample import resample

    audio44 = resample(audio[: int(2.5 * sr)], sr, 44100)
    stereo = np.stack([audio44, audio44], axis=1)
    t0 = time.monotonic()
    options = ClientOptions(url=server.url, encoding="f32le", realtime=True, speed=2.0)
    events = asyncio.run(stream_audio(stereo, 44100, options))
    assert time.monotonic() - t0 >= 2.5 / 2.0 * 0.9  # it really was paced
    assert final_text(events)
    snap = server.snapshot()
    assert abs(snap["audio_seconds"] - 2.5) < 0.05


def test_reconnect_after_normal_and_abnormal_ends(server, speech):
    audio, sr = speech
    short = audio[: int(1.5 * sr)]
    options = ClientOptions(url=server.url, realtime=False)
    first = asyncio.run(stream_audio(short, sr, options))
    # An abnormal end: garbage kills that session ...
    ws, _ = open_session(server.url)
    ws.send(b"\x00\x01\x02")
    messages, code = read_until_closed(ws)
    assert errors(messages) == ["bad_audio"] and code == 1007
    # ... and the same client reconnects and gets the same results as the first time.
    second = asyncio.run(stream_audio(short, sr, options))
    assert final_text(first) == final_text(second) != ""


def test_concurrent_sessions_are_isolated(server, fake_factory, speech):
    audio, sr = speech
    pieces = [audio[: int(1.2 * sr)], audio[: int(2.0 * sr)], audio]

    async def run_all():
        return await asyncio.gather(*(stream_audio(p, sr, ClientOptions(url=server.url, realtime=False)) for p in pieces))

    results = asyncio.run(run_all())
    for piece, events in zip(pieces, results):
        assert events[-1].type == "endpoint"
        end = max(w.end for e in events if e.type == "final" for w in e.words)
        assert end <= len(piece) / sr + 0.05  # no session saw another session's audio
    assert len(fake_factory.created) == 3
    assert len({id(r) for r in fake_factory.created}) == 3


# ------------------------------------------------------------------------------ auth / origin
def test_token_required(fake_factory, speech):
    options = options_for_tests(token="s3cret-token")
    with ServerThread(fake_factory, options) as server:
        for kwargs in ({}, {"additional_headers": {"Authorization": "Bearer wrong"}}):
            with pytest.raises(InvalidStatus) as info:
                connect(server.url, **kwargs)
            assert info.value.response.status_code == 401
        with pytest.raises(InvalidStatus):
            connect(server.url + "?token=s3cret")  # a prefix is not the token
        # Header and query parameter both work.
        ws, ready = open_session(server.url, additional_headers={"Authorization": "Bearer s3cret-token"})
        ws.close()
        ws, ready = open_session(server.url + "?token=s3cret-token")
        ws.close()
        assert ready["type"] == "ready"
        # The Python client reports a refusal clearly.
        audio, sr = speech
        with pytest.raises(ServerError) as err:
            asyncio.run(stream_audio(audio[:1600], sr, ClientOptions(url=server.url)))
        assert err.value.code == "unauthorized"
        events = asyncio.run(stream_audio(audio, sr, ClientOptions(url=server.url, token="s3cret-token", realtime=False)))
        assert final_text(events)
        # Health is public; metrics are not.
        assert server.get("/healthz")[0] == 200
        assert server.get("/metrics")[0] == 401
        assert server.get("/metrics", {"Authorization": "Bearer s3cret-token"})[0] == 200
        assert server.wait_idle()
        assert server.snapshot()["rejected"]["auth"] >= 4


def test_origin_allow_list(fake_factory):
    options = options_for_tests(allowed_origins=("https://captions.example",))
    with ServerThread(fake_factory, options) as server:
        with pytest.raises(InvalidStatus) as info:
            connect(server.url, origin="https://evil.example")
        assert info.value.response.status_code == 403
        for origin in ("https://captions.example", f"http://127.0.0.1:{server.port}", None):
            ws, ready = open_session(server.url, origin=origin)
            ws.close()
            assert ready["type"] == "ready"
        assert server.wait_idle()


# ------------------------------------------------------------------------------------ limits
def test_max_sessions(fake_factory):
    with ServerThread(fake_factory, options_for_tests(max_sessions=2)) as server:
        a, _ = open_session(server.url)
        b, _ = open_session(server.url)
        with connect(server.url) as c:
            messages, code = read_until_closed(c)
        assert errors(messages) == ["server_busy"] and code == 1013
        assert "2 sessions" in messages[0]["message"]
        a.close()
        deadline = time.monotonic() + 10
        while server.session_count() > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        d, ready = open_session(server.url)  # a slot is free again
        assert ready["type"] == "ready"
        b.close()
        d.close()
        assert server.wait_idle()
        assert server.snapshot()["rejected"] == {"busy": 1}


def test_idle_timeout_flushes_then_closes(fake_factory, speech):
    audio, _ = speech
    with ServerThread(fake_factory, options_for_tests(idle_timeout_seconds=1.0)) as server:
        ws, _ = open_session(server.url, {"realtime": False})
        with ws:
            for frame in frames(audio[: int(1.5 * SR)]):
                ws.send(frame)
            messages, code = read_until_closed(ws)  # then nothing: the server gives up on us
        assert code == 1008
        assert errors(messages) == ["idle_timeout"] and messages[-1]["type"] == "error"
        assert any(m["type"] == "final" for m in messages)  # the finals came first
        # A connection that never even starts is dropped too.
        with connect(server.url) as ws:
            messages, code = read_until_closed(ws)
        assert errors(messages) == ["idle_timeout"] and code == 1008
        assert server.wait_idle()


def test_session_length_limit(fake_factory, speech):
    audio, _ = speech
    with ServerThread(fake_factory, options_for_tests(max_session_seconds=1.5)) as server:
        ws, _ = open_session(server.url)
        with ws:
            t0 = time.monotonic()
            closed = None
            for frame in frames(np.tile(audio, 2)):
                try:
                    ws.send(frame)
                except Exception:
                    break
                time.sleep(0.1)
                if time.monotonic() - t0 > 4:
                    break
            messages, closed = read_until_closed(ws)
        assert "session_too_long" in errors(messages) and closed == 1008
        assert time.monotonic() - t0 < 4
        assert server.wait_idle()


def test_oversized_frame_closes_with_1009(fake_factory):
    with ServerThread(fake_factory, options_for_tests(max_message_bytes=4096)) as server:
        ws, _ = open_session(server.url)
        ws.send(b"\x00" * 4096)  # at the limit: fine
        ws.send(b"\x00" * 4098)
        messages, code = read_until_closed(ws)
        assert code == 1009
        assert server.wait_idle()
        assert server.snapshot()["sessions_total"] == 1


# ------------------------------------------------------------------------------ shutdown
def test_graceful_shutdown_flushes_and_goes_away(fake_factory, speech):
    audio, _ = speech
    server = ServerThread(fake_factory, options_for_tests()).start()
    ws, _ = open_session(server.url, {"realtime": False, "chunk": 0.3})
    for frame in frames(audio[: int(2.0 * SR)]):
        ws.send(frame)
    time.sleep(0.5)
    server.stop()  # what SIGTERM does
    messages, code = read_until_closed(ws)
    assert code == 1001
    assert messages[-1] == {"type": "error", "code": "shutting_down", "message": "the server is shutting down"}
    kinds = [m["type"] for m in messages]
    assert "final" in kinds and "endpoint" in kinds  # the finals were flushed before closing
    with pytest.raises(OSError):
        connect(server.url, open_timeout=2)  # no longer accepting


# ---------------------------------------------------------------------------------- http
def test_http_routes(server):
    status, body, headers = server.get("/")
    assert status == 200 and b"<title>burble live captions</title>" in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert headers["Content-Type"].startswith("text/html")
    for path in ("/app.js", "/capture-worklet.js", "/style.css", "/index.html?x=1"):
        assert server.get(path)[0] == 200, path
    for path in ("/nope", "/static/app.js", "/..%2f..%2fetc/passwd", "/app.js/..", "//etc/passwd"):
        assert server.get(path)[0] == 404, path
    status, body, _ = server.get("/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok", "model": "fake", "sessions": 0}
    status, body, headers = server.get("/metrics")
    assert status == 200 and b"burble_sessions_active 0" in body and headers["Content-Type"].startswith("text/plain")
    status, body, _ = server.get("/metrics.json")
    assert json.loads(body)["sessions_active"] == 0
    with pytest.raises(InvalidStatus) as info:
        connect(server.url.replace("/ws", "/other"))
    assert info.value.response.status_code == 404


# ----------------------------------------------------------------------------------- vosk
def test_vosk_dialect(server, speech):
    audio, _ = speech
    url = server.url.replace("/ws", "/vosk")
    with connect(url) as ws:
        ws.send(json.dumps({"config": {"sample_rate": 16000, "words": 1}}))
        replies = []
        for frame in frames(audio, 0.25):
            ws.send(frame)
            replies.append(json.loads(ws.recv(timeout=10)))  # exactly one reply per frame
        ws.send('{"eof" : 1}')
        final = json.loads(ws.recv(timeout=20))
        with pytest.raises(Exception):
            ws.recv(timeout=10)
        assert ws.close_code == 1000
    assert all(("partial" in r) != ("text" in r) for r in replies)
    results = [r for r in replies if "text" in r] + [final]
    text = " ".join(r["text"] for r in results if r["text"])
    assert text.startswith("w")  # the fake recognizer's words, whole utterances
    assert all(set(w) == {"conf", "start", "end", "word"} for r in results for w in r.get("result", []))


def test_vosk_audio_without_config_and_errors(server, speech):
    audio, _ = speech
    url = server.url.replace("/ws", "/vosk")
    with connect(url) as ws:
        ws.send(pcm16(audio[:4000]))  # no config: the server's default rate
        assert "partial" in json.loads(ws.recv(timeout=10))
        ws.send('{"reset": 1}')
        messages, code = read_until_closed(ws)
        assert errors(messages) == ["unknown_type"] and code == 1008
    with connect(url) as ws:
        ws.send(json.dumps({"config": {"sample_rate": 3}}))
        messages, code = read_until_closed(ws)
        assert errors(messages) == ["bad_field"]


async def vosk_test_py(uri: str, wav_path: Path, replies: list[dict]) -> None:
    """What vosk-server's websocket/test.py does (its replies collected instead of printed): the
    root URL, a config with its own spacing, 0.2 s frames each awaiting one reply, then eof."""
    async with async_connect(uri) as websocket:
        wf = wave.open(str(wav_path), "rb")
        await websocket.send('{ "config" : { "sample_rate" : %d } }' % (wf.getframerate()))
        buffer_size = int(wf.getframerate() * 0.2)  # 0.2 seconds of audio
        while True:
            data = wf.readframes(buffer_size)
            if len(data) == 0:
                break
            await websocket.send(data)
            replies.append(json.loads(await websocket.recv()))
        await websocket.send('{"eof" : 1}')
        replies.append(json.loads(await websocket.recv()))


def test_vosk_dialect_at_the_root(fake_factory, speech, tmp_path):
    """`burble serve --dialect vosk`: vosk-server's own client works against the root URL."""
    audio, sr = speech
    wav_path = tmp_path / "speech.wav"
    with wave.open(str(wav_path), "wb") as wf:
        wf.setnchannels(1)
        wf.setsampwidth(2)
        wf.setframerate(sr)
        wf.writeframes(pcm16(audio))
    with ServerThread(fake_factory, options_for_tests(dialect="vosk")) as server:
        root = f"ws://127.0.0.1:{server.port}"  # how test.py names the server: no path at all
        replies: list[dict] = []
        asyncio.run(vosk_test_py(root, wav_path, replies))
        # /ws keeps speaking the burble protocol next to it.
        events = asyncio.run(stream_audio(audio[: int(1.5 * sr)], sr, ClientOptions(url=server.url, realtime=False)))
        assert final_text(events)
        assert server.wait_idle()
    frames_sent = -(-len(audio) // int(0.2 * sr))
    assert len(replies) == frames_sent + 1  # one reply per frame, and the final result
    assert all(("partial" in r) != ("text" in r) for r in replies)
    text = " ".join(r["text"] for r in replies if r.get("text"))
    assert text.startswith("w")  # the fake recognizer's words
    # Negative control: a default server's root speaks burble, which refuses the Vosk config.
    refused: list[dict] = []
    with ServerThread(FakeFactory(), options_for_tests()) as burble_root:
        with pytest.raises(ConnectionClosed):
            asyncio.run(vosk_test_py(f"ws://127.0.0.1:{burble_root.port}", wav_path, refused))
    assert [(r.get("type"), r.get("code")) for r in refused] == [("error", "bad_message")]


def test_new_sessions_wait_while_recognition_lags(speech):
    """A live session whose recognizer cannot keep up (1.5 s per call) falls seconds behind its
    audio; a new connection meanwhile is refused with server_busy, 1013 and a retry hint, and
    admitted once the lagging session is gone. Negative control: without the lag limit the same
    connection is admitted."""
    audio, _ = speech
    frames = [pcm16(audio[i : i + 1600]) for i in range(0, len(audio) - 1600, 1600)]
    for limit in (1.0, None):
        with ServerThread(FakeFactory(delay=1.5), options_for_tests(admit_max_lag_seconds=limit)) as server:
            slow, _ = open_session(server.url)  # live: audio keeps arriving while a call runs
            deadline, i = time.monotonic() + 20, 0
            while server.snapshot()["lag_seconds"] < 1.5 and time.monotonic() < deadline:
                slow.send(frames[i % len(frames)])
                i += 1
                time.sleep(0.1)
            snapshot = server.snapshot()
            assert snapshot["lag_seconds"] >= 1.5 and max(snapshot["session_lag_seconds"].values()) >= 1.5
            if limit is None:
                other, ready = open_session(server.url)
                assert ready["type"] == "ready"
                other.close()
            else:
                with connect(server.url) as c:
                    messages, code = read_until_closed(c)
                assert errors(messages) == ["server_busy"] and code == 1013
                assert "lags" in messages[0]["message"] and messages[0]["retry_after"] >= 1.0
                assert server.snapshot()["rejected"] == {"lagging": 1}
            slow.close()
            deadline = time.monotonic() + 20
            while server.session_count() and time.monotonic() < deadline:
                time.sleep(0.05)
            other, ready = open_session(server.url)  # nothing lags: admitted
            assert ready["type"] == "ready"
            other.close()
            assert server.wait_idle()
