import numpy as np
import pytest
import soundfile as sf
import torch

from burble.asr.frontend import AudioDecodeError, load_audio, log_mel_spectrogram, pad_or_trim, to_audio_array


def test_log_mel_matches_faster_whisper_feature_extractor():
    fe_module = pytest.importorskip("faster_whisper.feature_extractor")
    audio = load_audio("examples/jfk.wav")
    ours = log_mel_spectrogram(audio, padding=160).numpy()
    theirs = fe_module.FeatureExtractor()(audio, padding=160)
    assert ours.shape == theirs.shape == (80, len(audio) // 160 + 1)
    assert np.abs(ours - theirs).max() < 1e-4


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


def test_pad_or_trim():
    mel = torch.ones(80, 10)
    assert pad_or_trim(mel, 20).shape == (80, 20) and pad_or_trim(mel, 20)[:, 10:].abs().sum() == 0
    assert pad_or_trim(torch.ones(80, 40), 20).shape == (80, 20)
