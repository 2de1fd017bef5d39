"""Protocol v1 parsing and validation (no network): every malformed input gets a named error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from burble.streaming.server.protocol import (
    CLOSE_CODES,
    ProtocolError,
    SessionConfig,
    decode_audio,
    message_type,
    parse_json_object,
)


def start(**fields) -> SessionConfig:
    return SessionConfig.from_message({"type": "start", **fields})


def test_defaults_and_full_start():
    assert start() == SessionConfig()
    config = start(
        version=1, sample_rate=44100, encoding="f32le", channels=2, language="EN", hotwords=[" burble "],
        partials=False, chunk=0.5, realtime=False, colour="blue",
    )  # fmt: skip
    assert config.sample_rate == 44100 and config.encoding == "f32le" and config.channels == 2
    assert config.language == "en" and config.hotwords == ("burble",) and not config.partials
    assert config.chunk_seconds == 0.5 and not config.realtime
    assert config.ignored == ("colour",)
    assert config.frame_bytes == 8 and config.bytes_per_second == 44100 * 8
    assert start(sample_rate=16000.0).sample_rate == 16000  # an integral float is an integer


@pytest.mark.parametrize(
    "fields, code, words",
    [
        ({"sample_rate": 0}, "bad_field", "sample_rate"),
        ({"sample_rate": -16000}, "bad_field", "sample_rate"),
        ({"sample_rate": 10**12}, "bad_field", "sample_rate"),
        ({"sample_rate": 7999}, "bad_field", "sample_rate"),
        ({"sample_rate": 16000.5}, "bad_field", "integer"),
        ({"sample_rate": "16000"}, "bad_field", "string"),
        ({"sample_rate": True}, "bad_field", "boolean"),
        ({"sample_rate": None}, "bad_field", "null"),
        ({"channels": 0}, "bad_field", "channels"),
        ({"channels": 9}, "bad_field", "channels"),
        ({"channels": [1]}, "bad_field", "array"),
        ({"encoding": "mp3"}, "bad_field", "encoding"),
        ({"encoding": 1}, "bad_field", "encoding"),
        ({"partials": "yes"}, "bad_field", "partials"),
        ({"partials": 1}, "bad_field", "partials"),
        ({"realtime": None}, "bad_field", "realtime"),
        ({"chunk": 0}, "bad_field", "chunk"),
        ({"chunk": 1000}, "bad_field", "chunk"),
        ({"chunk": {}}, "bad_field", "object"),
        ({"language": 5}, "bad_field", "language"),
        ({"language": "../../etc/passwd"}, "bad_field", "language"),
        ({"language": "x" * 100}, "bad_field", "language"),
        ({"hotwords": "burble"}, "bad_field", "hotwords"),
        ({"hotwords": [1, 2]}, "bad_field", "hotword"),
        ({"hotwords": [""]}, "bad_field", "hotword"),
        ({"hotwords": ["w"] * 1000}, "bad_field", "hotwords"),
        ({"version": 2}, "unsupported_version", "version"),
        ({"version": True}, "unsupported_version", "version"),
    ],
)
def test_bad_start_fields(fields, code, words):
    with pytest.raises(ProtocolError) as info:
        start(**fields)
    assert info.value.code == code
    assert words in info.value.message
    assert info.value.close_code == CLOSE_CODES[code]


@pytest.mark.parametrize(
    "text, code",
    [
        ("hello", "bad_json"),
        ("", "bad_json"),
        ('{"type": "start"', "bad_json"),
        ('{"type": "start", "sample_rate": NaN}', "bad_json"),
        ('{"type": "start", "sample_rate": Infinity}', "bad_json"),
        ('{"type": "start", "chunk": -Infinity}', "bad_json"),
        ('{"type": "start", "chunk": 1e999}', "bad_json"),
        ("[" * 100000 + "]" * 100000, "bad_json"),  # deep nesting: RecursionError, not a crash
        ("[1, 2]", "bad_message"),
        ('"start"', "bad_message"),
        ("null", "bad_message"),
    ],
)
def test_bad_json(text, code):
    with pytest.raises(ProtocolError) as info:
        parse_json_object(text)
    assert info.value.code == code


@pytest.mark.parametrize(
    "message, code",
    [({}, "bad_message"), ({"type": 1}, "bad_message"), ({"type": "begin"}, "unknown_type"), ({"type": "START"}, "unknown_type")],
)
def test_message_types(message, code):
    with pytest.raises(ProtocolError) as info:
        message_type(message)
    assert info.value.code == code
    assert message_type({"type": "stop"}) == "stop"


def test_decode_pcm16_and_float():
    samples = np.array([0, 1000, -32768, 32767], dtype="<i2")
    out = decode_audio(samples.tobytes(), start())
    assert out.dtype == np.int16 and np.array_equal(out, samples)

    config = start(encoding="f32le", channels=2)
    stereo = np.array([[0.5, -0.5], [2.0, -3.0]], dtype="<f4")
    out = decode_audio(stereo.tobytes(), config)
    assert out.shape == (2, 2)
    assert np.allclose(out, [[0.5, -0.5], [1.0, -1.0]])  # out-of-range floats are clipped


@pytest.mark.parametrize(
    "fields, payload, words",
    [
        ({}, b"\x00\x01\x02", "3 bytes"),
        ({"channels": 2}, b"\x00" * 6, "whole sample frames"),
        ({"encoding": "f32le"}, b"\x00" * 6, "whole sample frames"),
        ({"encoding": "f32le"}, np.array([0.1, np.nan], dtype="<f4").tobytes(), "NaN"),
        ({"encoding": "f32le"}, np.array([np.inf], dtype="<f4").tobytes(), "infinite"),
        ({"encoding": "f32le"}, np.array([-np.inf], dtype="<f4").tobytes(), "infinite"),
    ],
)
def test_bad_audio(fields, payload, words):
    with pytest.raises(ProtocolError) as info:
        decode_audio(payload, start(**fields))
    assert info.value.code == "bad_audio" and words in info.value.message
    assert info.value.close_code == 1007


def test_empty_frame_is_valid():
    assert len(decode_audio(b"", start())) == 0


def test_error_codes_are_closed_set():
    with pytest.raises(ValueError):
        ProtocolError("made_up", "x")
    assert json.loads(json.dumps(CLOSE_CODES))  # every code has a close code
