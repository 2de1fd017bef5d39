"""The codec recipe's STOI loss: its STOI agrees with pystoi's, falls as noise rises, and its gradient
reaches the decoded mel through the frozen vocoder and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.recipes.test_codec_asr_loss import LOCAL


def _module(monkeypatch):
    monkeypatch.syspath_prepend(str(LOCAL))
    import stoi_loss

    return stoi_loss


def _speech_like(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """Syllable-rate bursts of harmonics with a moving pitch: envelopes that vary in every STOI band."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 120 * (1 + 0.2 * np.sin(2 * np.pi * 0.5 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 25))
    envelope = np.clip(np.sin(2 * np.pi * 3.5 * t + rng.uniform(0, 6)), 0, None) ** 2
    return (0.3 * envelope * voiced + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.mark.parametrize("snr_db", [20, 5, -5])
def test_stoi_agrees_with_pystoi(monkeypatch, snr_db):
    from pystoi import stoi as reference

    module = _module(monkeypatch)
    clean = _speech_like(3.0, 16000)
    noise = np.random.default_rng(1).standard_normal(clean.size).astype(np.float32)
    noisy = clean + noise * np.sqrt((clean ** 2).mean() / (noise ** 2).mean() / 10 ** (snr_db / 10))
    ours = float(module.stoi(torch.from_numpy(clean), torch.from_numpy(noisy), 16000))
    assert abs(ours - reference(clean, noisy, 16000)) < 0.01
    assert float(module.stoi(torch.from_numpy(clean), torch.from_numpy(clean), 16000)) > 0.999


def test_stoi_falls_as_noise_rises(monkeypatch):
    module = _module(monkeypatch)
    clean = torch.from_numpy(_speech_like(3.0, 22050))
    noise = torch.from_numpy(np.random.default_rng(2).standard_normal(clean.numel()).astype(np.float32))
    scores = [float(module.stoi(clean, clean + level * noise, 22050)) for level in (0.01, 0.1, 0.5)]
    assert scores[0] > scores[1] > scores[2]
    with pytest.raises(ValueError, match="loud frames"):
        module.stoi(clean[:2000], clean[:2000], 22050)


def test_the_loss_trains_only_the_mel_it_scores(monkeypatch):
    from burble.codecs.mel import HOP, log_mel
    from burble.codecs.vocoder import load_vocoder

    module = _module(monkeypatch)
    torch.manual_seed(0)
    audio = torch.from_numpy(_speech_like(1.2, 22050))[None]
    audio = audio[:, : audio.shape[1] // HOP * HOP]
    loss = module.StoiLoss(load_vocoder("low-latency"), context=8, bfloat16=False)
    clean = loss(log_mel(audio), audio, HOP)
    blurred = (log_mel(audio) + 1.5 * torch.randn(1, 80, audio.shape[1] // HOP)).requires_grad_(True)
    value = loss(blurred, audio, HOP)
    assert 0 <= float(clean) < float(value.detach())  # copy-synthesis scores better than a noisy mel
    value.backward()
    assert float(blurred.grad[:, :, 8:].abs().sum()) > 0
    assert all(p.grad is None and not p.requires_grad for p in loss.vocoder.parameters())
