import numpy as np
import pytest
import soundfile as sf

from burble.audio.io import AudioDecodeError, load_audio, to_audio_array


def test_any_rate_is_resampled_to_16k(tmp_path):
    t = np.arange(8000 * 2) / 8000
    tone = 0.5 * np.sin(2 * np.pi * 440 * t).astype(np.float32)
    stereo = np.stack([tone, tone], axis=1)
    path = tmp_path / "tone.flac"
    sf.write(path, stereo, 8000)
    audio = load_audio(path)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(len(audio) - 32000) <= 2
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(np.argmax(spectrum) * 16000 / len(audio) - 440) < 2


def test_bad_inputs_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_audio(tmp_path / "missing.wav")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"this is not audio at all")
    with pytest.raises(AudioDecodeError, match="cannot decode"):
        load_audio(junk)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    with pytest.raises(AudioDecodeError, match="no audio"):
        load_audio(empty)
    with pytest.raises(ValueError, match="NaN"):
        to_audio_array(np.array([0.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="mono"):
        to_audio_array(np.zeros((2, 10), np.float32))


def test_tensors_and_arrays_give_the_same_samples():
    torch = pytest.importorskip("torch")
    samples = np.linspace(-1.0, 1.0, 100, dtype=np.float32)
    np.testing.assert_array_equal(to_audio_array(torch.from_numpy(samples)), samples)
    assert to_audio_array(samples.astype(np.float64)).dtype == np.float32
