"""The codec recipe's ASR-feature loss: codec mel frames land on Whisper's 100 Hz grid at the right times,
the fitted map turns the codec's log-magnitude mel into Whisper's log10 power mel, the loss is zero
only for a perfect reconstruction and trains the decoder alone, and stage 3 runs with it (and with the
STOI loss)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "recipes" / "codec" / "local"


def _module(monkeypatch):
    monkeypatch.syspath_prepend(str(LOCAL))
    import asr_feature_loss

    return asr_feature_loss


def _speech_like_shard(path: Path, clips: int) -> None:
    """Noise bursts with moving spectral peaks and loudness, so every mel bin varies over time."""
    from burble.codecs.mel import log_mel

    rng = np.random.default_rng(0)
    tensors, meta = {}, []
    for i in range(clips):
        t = np.arange(int(1.5 * 22050)) / 22050
        tone = sum(np.sin(2 * np.pi * np.cumsum(f0 * (1 + 0.5 * np.sin(2 * np.pi * (0.7 + k) * t))) / 22050)
                   for k, f0 in enumerate(rng.uniform(150, 3000, size=4)))
        envelope = 0.05 + np.abs(np.sin(2 * np.pi * rng.uniform(1, 4) * t))
        audio = (0.1 * envelope * (tone + 0.5 * rng.standard_normal(t.size))).astype(np.float32)
        audio = audio[: audio.size // 256 * 256]
        tensors[f"{i}.audio"] = torch.from_numpy(np.round(audio * 32767).astype(np.int16))
        tensors[f"{i}.mel"] = log_mel(audio).to(torch.float16)
        meta.append({"id": f"x{i}", "text": "t", "length_scale": 1.0})
    save_file(tensors, str(path), metadata={"clips": json.dumps(meta)})


def _tiny_encoder() -> torch.nn.Module:
    from burble.asr.whisper.model import AudioEncoder, WhisperDims

    torch.manual_seed(0)
    return AudioEncoder(WhisperDims(n_mels=80, n_audio_ctx=64, n_audio_state=32, n_audio_head=2, n_audio_layer=1,
                                    n_vocab=100, n_text_ctx=8, n_text_state=32, n_text_head=2, n_text_layer=1))


def test_codec_frames_move_to_whisper_times(monkeypatch):
    to_whisper_rate = _module(monkeypatch).to_whisper_rate
    centres = (torch.arange(200) * 256 + 128) / 22050  # each codec frame holds its centre time (seconds)
    resampled = to_whisper_rate(centres[None].repeat(3, 1))
    assert resampled.shape == (3, int(200 * 256 / 22050 * 100))
    inside = torch.arange(1, resampled.shape[1] - 1)  # the first frame's centre (5.8 ms) lies before 0.01 s
    torch.testing.assert_close(resampled[0, inside], inside / 100.0, atol=1e-6, rtol=0)
    # negative control: Whisper frames read off codec frames by index alone drift 16% late
    first = torch.arange(1, 150)
    assert float((centres[first] - first / 100.0).abs().max()) > 0.2


def test_the_fitted_map_predicts_whisper_mel(tmp_path, monkeypatch):
    from burble.asr.frontend import log_mel_from_power, power_spectrum
    from burble.audio.resample import resample

    module = _module(monkeypatch)
    _speech_like_shard(tmp_path / "train_0000.safetensors", 6)
    scale, offset = module.fit_whisper_map(tmp_path, clips=4)
    # a log-magnitude mel is half a log-power one: natural log -> log10 of power scales by 2 / ln 10 ~ 0.87
    assert 0.75 < float(scale.median()) < 1.0
    from safetensors import safe_open

    with safe_open(str(tmp_path / "train_0000.safetensors"), "pt") as f:  # clip 5: not fitted on
        audio = f.get_tensor("5.audio").float().numpy() / 32767.0
        mel = f.get_tensor("5.mel").float()
    target = log_mel_from_power(power_spectrum(torch.from_numpy(resample(audio, 22050, 16000)))[..., :-1])
    mapped = scale[:, None] * module.to_whisper_rate(mel) + offset[:, None]
    n = min(mapped.shape[1], target.shape[1])
    error = (mapped[:, :n] - target[:, :n]).abs().mean()
    assert float(error) < 0.4 * float((target[:, :n] - target[:, :n].mean(1, keepdim=True)).abs().mean())
    with pytest.raises(SystemExit, match="run stage 0"):
        module.fit_whisper_map(tmp_path / "missing")


def test_the_loss_is_zero_only_for_the_original_and_trains_only_its_input(monkeypatch):
    module = _module(monkeypatch)
    loss = module.AsrFeatureLoss(_tiny_encoder(), torch.full((80,), 0.87), torch.zeros(80))
    original = torch.randn(2, 80, 40) - 5
    assert float(loss(original, original)) == 0.0
    decoded = (original + 0.3 * torch.randn(original.shape)).requires_grad_(True)
    value = loss(decoded, original)
    assert float(value.detach()) > 0.01
    value.backward()
    assert decoded.grad is not None and float(decoded.grad.abs().sum()) > 0
    assert all(p.grad is None and not p.requires_grad for p in loss.encoder.parameters())


def test_stage_3_trains_the_decoder_with_the_asr_and_stoi_losses(tmp_path):
    from burble.codecs import load

    data, exp = tmp_path / "data", tmp_path / "exp"
    data.mkdir()
    _speech_like_shard(data / "train_0000.safetensors", 3)
    _speech_like_shard(data / "heldout_0000.safetensors", 1)
    done = subprocess.run(
        [sys.executable, str(LOCAL / "train.py"), "--data-dir", str(data), "--exp-dir", str(exp), "--steps", "1",
         "--batch-size", "2", "--segment", "16", "--warmup", "1", "--num-books", "2", "--codebook-size", "16",
         "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    weights = tmp_path / "codec.safetensors"
    done = subprocess.run([sys.executable, str(LOCAL / "export.py"), "--checkpoint", str(exp / "checkpoint.pt"),
                           "--out", str(weights), "--default-books", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    refined = tmp_path / "refined.safetensors"
    done = subprocess.run(
        [sys.executable, str(LOCAL / "refine_decoder.py"), "--data-dir", str(data), "--exp-dir", str(exp / "refine"),
         "--codec", str(weights), "--out", str(refined), "--units", "2", "--batch-size", "2", "--segment", "64",
         "--steps", "2", "--warmup", "1", "--threads", "1", "--favoured-books", "2", "--asr-weight", "1",
         "--asr-model", "tiny.en", "--asr-rows", "1", "--stoi-weight", "1", "--stoi-rows", "1", "--stoi-frames", "60"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    last = json.loads((exp / "refine" / "train.log").read_text().splitlines()[-1])
    assert last["step"] == 2 and last["asr"] > 0 and 0 < last["stoi"] < 1
    from safetensors import safe_open

    with safe_open(str(refined), "pt") as f:
        extra = json.loads(f.metadata()["extra"])
    assert extra["decoder_refined"]["asr_loss"] == {"weight": 1.0, "model": "tiny.en"}
    assert extra["decoder_refined"]["stoi_loss"] == {"weight": 1.0, "vocoder": "low-latency"}
    assert load(str(refined)).default_books == 2
