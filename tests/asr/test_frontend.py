import numpy as np
import pytest
import torch

from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
from burble.audio.io import load_audio


def test_log_mel_matches_faster_whisper_feature_extractor():
    fe_module = pytest.importorskip("faster_whisper.feature_extractor")
    audio = load_audio("examples/jfk.wav")
    ours = log_mel_spectrogram(audio, padding=160).numpy()
    theirs = fe_module.FeatureExtractor()(audio, padding=160)
    assert ours.shape == theirs.shape == (80, len(audio) // 160 + 1)
    assert np.abs(ours - theirs).max() < 1e-4


def test_pad_or_trim():
    mel = torch.ones(80, 10)
    assert pad_or_trim(mel, 20).shape == (80, 20) and pad_or_trim(mel, 20)[:, 10:].abs().sum() == 0
    assert pad_or_trim(torch.ones(80, 40), 20).shape == (80, 20)
