"""Int16 PCM <-> float32 samples: the one conversion the loaders, the ring buffer and the client use.

Scale: int16 -> float divides by 32768 and float -> int16 multiplies by 32768, rounds and clips to
[-32768, 32767]. A power-of-two scale is exact in float32, so every int16 sample survives the round
trip int16 -> float -> int16 unchanged (-32768 -> -1.0 -> -32768, 32767 -> 32767/32768 -> 32767).
Scaling by 32767 instead would map -32768 below -1.0 and break that; the price of 32768 is that
float +1.0 clips to 32767 (one LSB), which matters to no model. Only numpy is imported here, so the
client and the real-time ring buffer can use it without loading anything heavier.
"""

from __future__ import annotations

import numpy as np

INT16_SCALE = 32768.0


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples (nominally [-1, 1], clipped) or int16 (returned as is) -> int16 PCM, any shape.

    Raises:
      ValueError: for integer types other than int16 (their scale is unknown).
    """
    samples = np.asarray(samples)
    if samples.dtype == np.int16:
        return samples
    if not np.issubdtype(samples.dtype, np.floating):
        raise ValueError(f"unsupported sample dtype {samples.dtype} (use float32/float64 or int16)")
    # Multiplying by a power of two is exact in the input's own dtype: no float64 copy needed.
    return np.clip(np.round(samples * INT16_SCALE), -32768, 32767).astype(np.int16)


def to_float32(samples: np.ndarray) -> np.ndarray:
    """Int16 PCM (scaled by 1/32768) or float samples (cast) -> float32, any shape.

    Raises:
      ValueError: for integer types other than int16.
    """
    samples = np.asarray(samples)
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / np.float32(INT16_SCALE)
    if np.issubdtype(samples.dtype, np.floating):
        return samples.astype(np.float32, copy=False)
    raise ValueError(f"unsupported sample dtype {samples.dtype} (use float32/float64 or int16)")
