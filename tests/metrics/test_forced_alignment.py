import re

import numpy as np
import pytest

pytest.importorskip("pocketsphinx")

from burble.metrics.alignment import (  # noqa: E402
    AlignmentError,
    ForcedAligner,
    alignment_words,
    default_aligner,
    force_align,
)
from burble.metrics.pronounce import _letters  # noqa: E402
from burble.audio.resample import resample  # noqa: E402
from burble.testing.dev_audio import dev_audio_items, dev_item, require_shared  # noqa: E402


def _check(words, item, audio):
    ref = item.text_normalized.split()
    assert [w.word for w in words] == ref
    duration = len(audio) / 16000
    for w, nxt in zip(words, words[1:] + [None]):
        assert 0.0 <= w.start < w.end <= duration + 1e-6
        assert w.end - w.start >= 0.03 - 1e-9  # each phone takes at least 3 frames of 10 ms
        if nxt is not None:
            assert w.end <= nxt.start + 1e-6  # monotonic, no overlap


def test_alignment_words():
    assert alignment_words("Mr. O’Brien's second-floor café, 1818!") == ["mr", "o'brien's", "second", "floor", "cafe", "1818"]
    assert alignment_words("'quoted' and/or") == ["quoted", "and", "or"]
    assert alignment_words("... --- !!!") == []


@pytest.mark.parametrize("item_id", ["ls_1089-134686-0001", "jfk_inaugural_ask_not", "timit_LDC93S1"])
def test_dev_clips(item_id):
    require_shared("dev-audio")
    item = dev_item(item_id)
    audio = item.load()
    words = force_align(audio, item.text)  # verbatim text: casing and punctuation are handled
    _check(words, item, audio)


def test_oov_word_is_aligned():
    """'counselled' is not in the CMU dictionary; its guessed phones keep it in place."""
    require_shared("dev-audio")
    item = dev_item("ls_1089-134686-0001")
    audio = item.load()
    aligner = ForcedAligner()
    assert aligner._decoder.lookup_word("counselled") is None
    words = aligner.align(audio, item.text_normalized)
    assert aligner.dictionary_name("counselled") == "counselled"  # added with guessed phones
    w = words[6]
    assert w.word == "counselled" and 0.3 < w.end - w.start < 0.9
    # the span is speech, not a pause
    seg = audio[int(w.start * 16000): int(w.end * 16000)]
    assert np.sqrt(np.mean(seg**2)) > 0.5 * np.sqrt(np.mean(audio**2))


def test_rough_pronunciations_barely_move_boundaries():
    """Letter-rule phones for a word (as an OOV word would get) shift boundaries < 150 ms."""
    require_shared("dev-audio")
    item = dev_item("jfk_inaugural_ask_not")
    audio = item.load()
    ref = force_align(audio, item.text)
    rough = ForcedAligner(pronunciations={"americans": " ".join(_letters("americans"))})
    got = rough.align(audio, item.text)
    assert [w.word for w in got] == [w.word for w in ref]
    assert max(max(abs(a.start - b.start), abs(a.end - b.end)) for a, b in zip(ref, got)) < 0.15


def test_known_structure_of_concatenated_prompts():
    """The long clip is 20 prompts joined by 0.6 s digital silences: every prompt's last word
    must end just before its gap and the next prompt's first word start just after it."""
    require_shared("dev-audio")
    item = dev_item("long_kathleen_20prompts")
    audio = item.load()
    words = force_align(audio, item.text)
    _check(words, item, audio)
    zero = np.r_[0, (audio == 0).astype(np.int8), 0]
    edges = np.diff(zero)
    gaps = [(s / 16000, e / 16000) for s, e in zip(np.where(edges == 1)[0], np.where(edges == -1)[0]) if e - s >= 1600]
    sentences = re.split(r"(?<=[.!?])\s+", item.text.strip())
    assert len(gaps) == len(sentences) - 1 == 19
    k = 0
    for sentence, (gap_start, gap_end) in zip(sentences, gaps):
        k += len(alignment_words(sentence))
        assert 0.0 <= gap_start - words[k - 1].end < 0.3, (words[k - 1], gap_start)
        assert 0.0 <= words[k].start - gap_end < 0.3, (words[k], gap_end)


def test_other_sample_rates():
    require_shared("dev-audio")
    item = dev_item("timit_LDC93S1")
    audio = item.load()
    at_16k = force_align(audio, item.text)
    at_8k = force_align(resample(audio, 16000, 8000), item.text, sample_rate=8000)
    assert max(abs(a.end - b.end) for a, b in zip(at_16k, at_8k)) <= 0.05


def test_errors():
    aligner = default_aligner()
    with pytest.raises(ValueError, match="no words"):
        aligner.align(np.zeros(16000, np.float32), "?!")
    with pytest.raises(ValueError):
        aligner.align(np.zeros(0, np.float32), "hello")
    with pytest.raises(AlignmentError):
        # 50 ms cannot hold ten words (each phone needs at least 3 frames)
        aligner.align(np.random.default_rng(0).normal(0, 0.1, 800).astype(np.float32), "one two three four five six seven eight nine ten")


@pytest.mark.slow
def test_every_dev_clip():
    require_shared("dev-audio")
    for item in dev_audio_items():
        audio = item.load()
        _check(force_align(audio, item.text), item, audio)
