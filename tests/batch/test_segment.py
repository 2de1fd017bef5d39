import numpy as np
import pytest

from burble.batch.segment import Chunk, Segmenter, fixed_chunks, merge_spans
from burble.testing import dev_audio_items, require_shared

SR = 16000


def test_fixed_chunks_cover_the_recording():
    chunks = fixed_chunks(65 * SR)
    assert chunks == [Chunk(0, 30 * SR), Chunk(30 * SR, 60 * SR), Chunk(60 * SR, 65 * SR)]
    assert fixed_chunks(0) == []


def test_merge_spans_packs_contiguous_chunks_up_to_the_limit():
    spans = [(0, 10), (12, 20), (25, 40), (41, 45), (60, 130)]
    assert merge_spans(spans, 30) == [Chunk(0, 20), Chunk(25, 45), Chunk(60, 90), Chunk(90, 120), Chunk(120, 130)]
    assert merge_spans([], 30) == []


def test_segmenter_modes():
    with pytest.raises(ValueError, match="segmentation must be one of"):
        Segmenter("words")
    with pytest.raises(ValueError, match="max_seconds"):
        Segmenter("vad", 40)
    short = np.zeros(10 * SR, np.float32)
    assert Segmenter("auto")(short) == [Chunk(0, 10 * SR)]  # a short file is one window, no VAD
    assert Segmenter("vad")(short) == []  # silence has no speech chunks


def test_vad_chunks_of_a_long_recording_fall_in_pauses():
    require_shared()
    item = next(it for it in dev_audio_items() if it.duration_s > 60)
    audio = item.load()
    chunks = Segmenter("auto")(audio)
    assert len(chunks) >= 3
    assert all(0 < c.duration <= 30 for c in chunks)
    assert all(a.end <= b.start for a, b in zip(chunks, chunks[1:]))
    # Chunks cover nearly all of a recording that is speech with short pauses, and their edges
    # are quieter than the speech inside them (cuts fall in pauses, not mid-word).
    assert sum(c.duration for c in chunks) > 0.8 * item.duration_s
    rms = lambda x: float(np.sqrt(np.mean(np.square(x)) + 1e-12))
    edge = np.mean([rms(audio[c.end - 1600 : c.end]) for c in chunks[:-1]])
    inside = np.mean([rms(audio[c.start : c.end]) for c in chunks])
    assert edge < 0.5 * inside
