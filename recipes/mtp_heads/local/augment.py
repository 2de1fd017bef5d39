"""Acoustic augmentation of the synthetic clips: speech nearer what real recordings sound like.

The draft layer trained on clean Piper and espeak-ng speech accepts 2.11 tokens a pass on held-out
synthetic clips but 1.71 on the real dev recordings (RESULTS_eagle.md), so stage 0 can roughen a
share of its clips the way rooms, microphones and lines do:

* speed perturbation (0.9-1.1x, tempo and pitch together, as Kaldi recipes do);
* a synthetic room (an exponentially decaying noise tail, RT60 0.15-0.7 s) mixed with the dry signal;
* additive noise (white, pink or brown) at 8-30 dB SNR;
* a telephone band (300-3400 Hz) on some clips;
* a level change (-15 to +3 dB), clipped at full scale like an overdriven input.

Each effect is drawn independently; :func:`augment` returns the audio and a short label of what
was applied (kept in the shard's metadata).
"""

from __future__ import annotations

import numpy as np
from scipy import signal

SAMPLE_RATE = 16000


def _speed(audio: np.ndarray, factor: float) -> np.ndarray:
    """Play ``factor`` times faster (shorter and higher), by resampling."""
    from burble.audio.resample import resample

    return resample(audio, round(SAMPLE_RATE * factor), SAMPLE_RATE)


def _room(audio: np.ndarray, rt60: float, wet: float, rng: np.random.Generator) -> np.ndarray:
    """Convolve with a synthetic impulse response: a direct path and a noise tail decaying 60 dB in ``rt60``."""
    length = int(rt60 * SAMPLE_RATE)
    t = np.arange(length) / SAMPLE_RATE
    tail = rng.standard_normal(length) * np.exp(-6.9 * t / rt60)  # ln(1000) = 6.9: -60 dB at rt60
    tail[: int(0.002 * SAMPLE_RATE)] = 0.0  # the first reflections arrive after the direct sound
    tail /= np.sqrt(np.sum(tail**2)) + 1e-9
    response = np.zeros(length)
    response[0] = 1.0
    response += wet * tail
    out = signal.fftconvolve(audio, response)[: len(audio)]
    return (out * (np.abs(audio).max() / (np.abs(out).max() + 1e-9))).astype(np.float32)


def _noise(audio: np.ndarray, snr_db: float, colour: str, rng: np.random.Generator) -> np.ndarray:
    """Add white, pink (1/f) or brown (1/f^2) noise at ``snr_db`` below the speech's power."""
    white = rng.standard_normal(len(audio))
    if colour != "white":
        spectrum = np.fft.rfft(white)
        f = np.maximum(np.fft.rfftfreq(len(audio)), 1.0 / len(audio))
        spectrum /= np.sqrt(f) if colour == "pink" else f
        white = np.fft.irfft(spectrum, n=len(audio))
    speech_power = float(np.mean(audio**2)) + 1e-12
    noise = white * np.sqrt(speech_power / (np.mean(white**2) + 1e-12) / 10 ** (snr_db / 10))
    return (audio + noise).astype(np.float32)


def _telephone(audio: np.ndarray) -> np.ndarray:
    """A 300-3400 Hz band, as on a phone line."""
    sos = signal.butter(4, [300, 3400], btype="bandpass", fs=SAMPLE_RATE, output="sos")
    return signal.sosfilt(sos, audio).astype(np.float32)


def augment(audio: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Apply a random draw of the effects above to 16 kHz mono ``audio``.

    Args:
      audio: float32 samples at 16 kHz.
      rng: the random source (seed it per clip for reproducible shards).

    Returns:
      ``(augmented audio, label)``, the label listing the effects (e.g. ``speed1.07+room0.42+pink14dB``).
    """
    applied = []
    if rng.random() < 0.5:
        factor = float(rng.uniform(0.9, 1.1))
        audio = _speed(audio, factor)
        applied.append(f"speed{factor:.2f}")
    if rng.random() < 0.5:
        rt60 = float(rng.uniform(0.15, 0.7))
        audio = _room(audio, rt60, wet=float(rng.uniform(0.3, 1.0)), rng=rng)
        applied.append(f"room{rt60:.2f}")
    if rng.random() < 0.6:
        snr = float(rng.uniform(8, 30))
        colour = str(rng.choice(["white", "pink", "brown"]))
        audio = _noise(audio, snr, colour, rng)
        applied.append(f"{colour}{snr:.0f}dB")
    if rng.random() < 0.15:
        audio = _telephone(audio)
        applied.append("telephone")
    gain_db = float(rng.uniform(-15, 3))
    audio = np.clip(audio * 10 ** (gain_db / 20), -1.0, 1.0).astype(np.float32)
    applied.append(f"gain{gain_db:+.0f}dB")
    return audio, "+".join(applied)
