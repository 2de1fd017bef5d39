import math
import time

import numpy as np
import pytest

from burble.metrics.alignment import AlignedWord
from burble.metrics.latency import (
    AudioClock,
    EmittedWord,
    LatencySummary,
    awed,
    first_partial_latency,
    match_emitted_words,
    pooled_awed,
    words_from_events,
)

REF = [
    AlignedWord("ask", 0.5, 0.8),
    AlignedWord("not", 0.8, 1.1),
    AlignedWord("what", 1.3, 1.6),
    AlignedWord("your", 1.6, 1.8),
    AlignedWord("country", 1.8, 2.4),
]


def test_exact_matches_only_by_default():
    emitted = [
        EmittedWord(" Ask", 1.0),
        EmittedWord("not,", 1.5),
        EmittedWord("uh", 1.6),  # insertion: ignored
        EmittedWord("when", 2.0),  # substitution for "what"
        EmittedWord("your", 2.1),
        EmittedWord("country.", 3.4),
    ]
    delays = match_emitted_words(emitted, REF)
    assert [d.word for d in delays] == ["ask", "not", "your", "country"]
    assert [round(d.delay, 6) for d in delays] == [0.2, 0.4, 0.3, 1.0]
    with_subs = match_emitted_words(emitted, REF, include_substitutions=True)
    assert [d.word for d in with_subs] == ["ask", "not", "what", "your", "country"]
    assert with_subs[2].delay == pytest.approx(0.4)


def test_awed_statistics():
    emitted = [EmittedWord(w.word, w.end + d) for w, d in zip(REF, [0.1, 0.2, 0.3, 0.4, 1.5])]
    s = awed(emitted, REF)
    assert s.count == 5 and s.reference_words == 5
    assert s.median == pytest.approx(0.3)
    assert s.p90 == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4, 1.5], 90))
    assert s.mean == pytest.approx(0.5) and s.max == pytest.approx(1.5)


def test_negative_delays_are_kept():
    s = awed([EmittedWord("ask", 0.7)], REF)
    assert s.median == pytest.approx(-0.1) and s.count == 1 and s.reference_words == 5


def test_hyphenated_word_covers_two_reference_words():
    ref = [AlignedWord("second", 0.0, 0.4), AlignedWord("floor", 0.4, 0.8)]
    delays = match_emitted_words([EmittedWord("second-floor", 1.0)], ref)
    assert [(d.word, round(d.delay, 6)) for d in delays] == [("second", 0.6), ("floor", 0.2)]


def test_nothing_matched():
    s = awed([], REF)
    assert s.count == 0 and math.isnan(s.median) and math.isnan(s.p90)
    assert awed([EmittedWord("banana", 1.0)], REF).count == 0


def test_pooled():
    a = match_emitted_words([EmittedWord("ask", 1.8)], REF)  # 1.0
    b = match_emitted_words([EmittedWord("not", 1.3), EmittedWord("what", 1.8)], REF)  # 0.2, 0.2
    s = pooled_awed([a, b], reference_words=10)
    assert s.count == 3 and s.median == pytest.approx(0.2) and s.reference_words == 10
    assert LatencySummary.from_delays([], 0).count == 0


def test_events():
    events = [
        {"type": "partial", "text": "", "words": [], "emitted_at": 0.6},
        {"type": "partial", "text": "ask", "words": [{"word": "ask", "start": 0.5, "end": 0.8}], "emitted_at": 0.9},
        {"type": "final", "text": "ask not", "words": [{"word": " ask"}, {"word": " not"}], "emitted_at": 1.7},
        {"type": "endpoint", "emitted_at": 1.8},
        {"type": "final", "text": "what", "words": [{"word": "what"}], "emitted_at": 2.2},
    ]
    words = words_from_events(events)
    assert [(w.word, w.emitted_at) for w in words] == [(" ask", 1.7), (" not", 1.7), ("what", 2.2)]
    assert [d.word for d in match_emitted_words(words, REF)] == ["ask", "not", "what"]
    assert first_partial_latency(events, REF) == pytest.approx(0.4)  # 0.9 - onset 0.5
    assert first_partial_latency(events[:1], REF) is None
    with pytest.raises(ValueError):
        first_partial_latency(events, [])

    class Event:  # attribute access works as well as dicts
        type = "final"
        words = ["ask"]
        emitted_at = 3.0

    assert words_from_events([Event()]) == [EmittedWord("ask", 3.0)]
    with pytest.raises(KeyError):
        words_from_events([{"type": "final", "words": ["x"]}])


def test_audio_clock():
    clock = AudioClock()
    with pytest.raises(RuntimeError):
        clock.now()
    clock.start(time.monotonic() - 2.0)
    assert 2.0 <= clock.now() < 3.0
    clock.start()
    assert 0.0 <= clock.now() < 0.5
