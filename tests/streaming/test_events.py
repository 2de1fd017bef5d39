import json
import math

import pytest

from burble.streaming.events import StreamEvent, Word, words_text


def test_json_has_the_documented_fields():
    words = [Word(" Hello,", 0.5, 0.81234, 0.9), Word(" world.", 0.9, 1.2, 0.8)]
    ev = StreamEvent.from_words("final", words, segment_id=3)
    ev = StreamEvent(**{**ev.__dict__, "emitted_at": 2.0004})
    line = ev.to_json()
    assert "\n" not in line
    d = json.loads(line)
    assert list(d) == ["type", "text", "words", "start", "end", "emitted_at", "segment_id"]
    assert d["type"] == "final"
    assert d["text"] == " Hello, world."
    assert d["words"] == [
        {"word": " Hello,", "start": 0.5, "end": 0.812},
        {"word": " world.", "start": 0.9, "end": 1.2},
    ]
    assert all(set(w) == {"word", "start", "end"} for w in d["words"])
    assert (d["start"], d["end"], d["emitted_at"], d["segment_id"]) == (0.5, 1.2, 2.0, 3)


def test_round_trip_and_unicode():
    ev = StreamEvent("partial", " café ünïcode", (Word(" café", 1.0, 1.5),), 1.0, 1.5, 4.25, 1)
    line = ev.to_json()
    assert "café" in line  # not \u-escaped
    back = StreamEvent.from_json(line)
    assert back.text == ev.text and back.type == "partial" and back.emitted_at == 4.25
    assert back.words[0].word == " café" and math.isnan(back.words[0].probability)


def test_from_words_empty_endpoint():
    ev = StreamEvent.from_words("endpoint", [], start=3.0, segment_id=2)
    assert ev.text == "" and ev.start == 3.0 and ev.end == 3.0 and ev.words == ()
    assert json.loads(ev.to_json())["emitted_at"] is None


def test_validation():
    with pytest.raises(ValueError):
        StreamEvent("interim", "x")
    with pytest.raises(ValueError):
        Word(" x", 2.0, 1.0)
    assert words_text([Word(" a", 0, 1), Word(" b", 1, 2)]) == " a b"
