"""Small audio I/O for test helpers: read any soundfile-readable file as 16 kHz float32 mono.

The ASR frontend has its own loader; this one exists so that the test-data helpers (and the
metrics that align reference text) do not depend on the recognizer they are used to test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np

SAMPLE_RATE = 16000


def resample(audio: np.ndarray, orig_rate: int, new_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a mono float signal with torchaudio's band-limited sinc interpolation.

    Args:
      audio: 1-D float array.
      orig_rate: its sample rate in Hz.
      new_rate: wanted sample rate in Hz.

    Returns:
      float32 1-D array at ``new_rate``.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {audio.shape}")
    if orig_rate <= 0 or new_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_rate} -> {new_rate}")
    if orig_rate == new_rate:
        return audio
    import torch
    import torchaudio.functional as AF

    out = AF.resample(torch.from_numpy(audio), orig_rate, new_rate)
    return out.numpy().astype(np.float32, copy=False)


def read_audio(path: Union[str, Path], sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Read an audio file as float32 mono at ``sample_rate`` (channels are averaged).

    Args:
      path: file readable by libsndfile (wav, flac, ogg, ...).
      sample_rate: output rate in Hz.
    """
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"audio file not found: {path}")
    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    return resample(audio.mean(axis=1), rate, sample_rate)


def to_pcm16(audio: np.ndarray) -> np.ndarray:
    """Float [-1, 1] -> int16 PCM with clipping (what engines fed raw bytes want)."""
    audio = np.asarray(audio, dtype=np.float32)
    return (np.clip(audio, -1.0, 1.0) * 32767.0).round().astype(np.int16)
