"""Audio in, Whisper log-mel out: decoding files, resampling, and the 80-bin log-mel frontend.

Whisper's features: 16 kHz audio, 25 ms Hann windows (400 samples) every 10 ms (160 samples),
power spectrum -> Slaney mel filters (librosa) -> log10, clamped to 8 dB (in log10 units) below
the maximum, scaled to roughly [-1, 1]. The maximum is taken over the whole input, so long-form
transcription computes the features of the whole file once and slices 30 s windows from them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Union

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples in a 30 s window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100
INPUT_STRIDE = 2  # the encoder's second convolution halves the frame rate
TIME_PER_AUDIO_TOKEN = INPUT_STRIDE * HOP_LENGTH / SAMPLE_RATE  # 0.02 s

AudioInput = Union[str, Path, np.ndarray, torch.Tensor]


class AudioDecodeError(ValueError):
    """A file could not be read as audio."""


def resample(audio: np.ndarray, orig_rate: int, new_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling with torchaudio (sinc interpolation)."""
    if orig_rate == new_rate:
        return audio.astype(np.float32, copy=False)
    if orig_rate <= 0:
        raise ValueError(f"invalid sample rate {orig_rate}")
    tensor = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))
    return AF.resample(tensor, orig_rate, new_rate).numpy()


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Read any file libsndfile can decode (wav, flac, ogg, mp3, ...) as mono float32 at ``sample_rate``.

    Raises:
      FileNotFoundError: the file does not exist.
      AudioDecodeError: the file is not decodable audio (or is empty).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as error:  # soundfile raises several types for bad input
        raise AudioDecodeError(f"{path}: cannot decode audio ({error})") from None
    if data.shape[0] == 0:
        raise AudioDecodeError(f"{path}: the file holds no audio samples")
    return resample(data.mean(axis=1), rate, sample_rate)


def to_audio_array(audio: AudioInput) -> np.ndarray:
    """Accept a path, a numpy array or a tensor of 16 kHz mono samples."""
    if isinstance(audio, (str, Path)):
        return load_audio(audio)
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu().numpy()
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"expected mono audio (1-D), got shape {audio.shape}")
    if not np.all(np.isfinite(audio)):
        raise ValueError("audio contains NaN or infinite samples")
    return audio


@lru_cache(maxsize=4)
def mel_filters(n_mels: int = 80) -> torch.Tensor:
    """Slaney-scale mel filterbank ``(n_mels, N_FFT // 2 + 1)``, the one Whisper was trained with."""
    import librosa

    return torch.from_numpy(librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=n_mels)).float()


def log_mel_spectrogram(audio: np.ndarray | torch.Tensor, *, n_mels: int = 80, padding: int = 0) -> torch.Tensor:
    """Whisper log-mel features ``(n_mels, n_frames)`` of 16 kHz mono audio.

    Args:
      audio: samples at 16 kHz.
      n_mels: 80 (or 128 for large-v3).
      padding: zero samples appended before analysis (30 s for long-form transcription, so the
        last window is complete).
    """
    tensor = torch.as_tensor(audio, dtype=torch.float32)
    if padding:
        tensor = torch.nn.functional.pad(tensor, (0, padding))
    window = torch.hann_window(N_FFT)
    stft = torch.stft(tensor, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel = mel_filters(n_mels) @ magnitudes
    log_spec = torch.clamp(mel, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def pad_or_trim(mel: torch.Tensor, length: int = N_FRAMES) -> torch.Tensor:
    """Cut or zero-pad the last axis to ``length`` frames."""
    if mel.shape[-1] > length:
        return mel[..., :length]
    if mel.shape[-1] < length:
        return torch.nn.functional.pad(mel, (0, length - mel.shape[-1]))
    return mel
