"""Audio files and arrays in, 16 kHz mono float32 out: the one loader every part of burble uses.

The recognizer, batch jobs, the test-data helpers and the forced aligner all read audio here, so a
file means the same samples wherever it is read. Decoding is libsndfile's (wav, flac, ogg, mp3,
...); channels are averaged; other rates go through ``burble.audio.resample.resample``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.pcm import to_pcm16
from burble.audio.resample import resample

if TYPE_CHECKING:
    import torch

AudioInput = Union[str, Path, np.ndarray, "torch.Tensor"]

# ``to_pcm16`` (float -> int16 PCM, what engines fed raw bytes want) lives in ``burble.audio.pcm``
# with its inverse; it stays importable from here, where callers have always found it.
__all__ = ["AudioDecodeError", "AudioInput", "load_audio", "to_audio_array", "to_pcm16"]


class AudioDecodeError(ValueError):
    """A file could not be read as audio."""


def load_audio(path: Union[str, Path], sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Read any file libsndfile can decode (wav, flac, ogg, mp3, ...) as mono float32 at ``sample_rate``.

    Raises:
      FileNotFoundError: the file does not exist.
      AudioDecodeError: the file is not decodable audio (or is empty).
    """
    import soundfile as sf

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
    """Accept a path, a numpy array or a tensor of 16 kHz mono samples; return float32 samples.

    Raises:
      ValueError: the array is not 1-D or holds NaN or infinite samples.
    """
    if isinstance(audio, (str, Path)):
        return load_audio(audio)
    if not isinstance(audio, np.ndarray) and hasattr(audio, "detach"):
        # A torch tensor: checked by duck type so that this module never imports torch itself.
        audio = audio.detach().cpu().numpy()
    samples = np.asarray(audio, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"expected mono audio (1-D), got shape {samples.shape}")
    if not np.all(np.isfinite(samples)):
        raise ValueError("audio contains NaN or infinite samples")
    return samples
