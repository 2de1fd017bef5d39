"""Whisper's log-mel frontend: 16 kHz samples in, the 80-bin (or 128-bin) log-mel features out.

Whisper's features: 16 kHz audio, 25 ms Hann windows (400 samples) every 10 ms (160 samples),
power spectrum -> Slaney mel filters (librosa) -> log10, clamped to 8 dB (in log10 units) below
the maximum, scaled to roughly [-1, 1]. The maximum is taken over the whole input, so long-form
transcription computes the features of the whole file once and slices 30 s windows from them.
Reading and resampling audio is ``burble.audio``'s job.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from burble.audio import SAMPLE_RATE

N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples in a 30 s window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100
INPUT_STRIDE = 2  # the encoder's second convolution halves the frame rate
TIME_PER_AUDIO_TOKEN = INPUT_STRIDE * HOP_LENGTH / SAMPLE_RATE  # 0.02 s


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
    # Whisper drops the last STFT frame (the one centred past the end of the audio).
    log_spec = log_mel_from_power(power_spectrum(tensor)[..., :-1], n_mels)
    return scale_log_mel(log_spec, log_spec.max())


def power_spectrum(samples: torch.Tensor, *, center: bool = True) -> torch.Tensor:
    """``|STFT|^2`` ``(N_FFT // 2 + 1, n_frames)`` with Whisper's Hann window and hop.

    Args:
      samples: 1-D float32 samples.
      center: reflect-pad ``N_FFT // 2`` samples at both ends (Whisper's framing, frame ``k``
        centred on sample ``k * HOP_LENGTH``); ``False`` frames the samples as given, which is how
        the streaming frontend computes frames whose window it already holds.
    """
    stft = torch.stft(samples, N_FFT, HOP_LENGTH, window=torch.hann_window(N_FFT), center=center, return_complex=True)
    return stft.abs() ** 2


def log_mel_from_power(power: torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """Unclamped ``log10`` mel energies ``(n_mels, n_frames)`` of a power spectrum (floored at 1e-10)."""
    mel = mel_filters(n_mels) @ power
    return torch.clamp(mel, min=1e-10).log10()


def scale_log_mel(log_spec: torch.Tensor, peak: torch.Tensor | float) -> torch.Tensor:
    """Whisper's dynamic-range clamp (8 below ``peak``, in log10 units) and scaling to about [-1, 1].

    Args:
      log_spec: :func:`log_mel_from_power` output.
      peak: the maximum the clamp is relative to: the whole input's offline, the running maximum
        of what has been seen in :mod:`burble.asr.streaming_frontend`.
    """
    log_spec = torch.maximum(log_spec, torch.as_tensor(peak, dtype=log_spec.dtype) - 8.0)
    return (log_spec + 4.0) / 4.0


def pad_or_trim(mel: torch.Tensor, length: int = N_FRAMES) -> torch.Tensor:
    """Cut or zero-pad the last axis to ``length`` frames."""
    if mel.shape[-1] > length:
        return mel[..., :length]
    if mel.shape[-1] < length:
        return torch.nn.functional.pad(mel, (0, length - mel.shape[-1]))
    return mel
