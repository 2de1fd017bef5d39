"""A STOI loss for the codec's decoder: the decoded mel is vocoded and scored against the original audio.

STOI (Taal et al., 2011), the intelligibility goal of the codec issue, correlates the original's and
the reconstruction's third-octave band envelopes over 384 ms. The decoder's mel losses cannot see
what the vocoder does to their errors, and a mel-domain envelope loss barely moved STOI (README),
so this loss runs the frozen vocoder the benchmark uses and computes STOI on the audio, in torch and
differentiably, so the gradient reaches the decoded mel through the vocoder:

- both signals are resampled to 10 kHz; frames of 256 samples (hop 128, Hann) more than 40 dB
  below the original's loudest are dropped from both (pystoi overlap-adds the kept frames into a
  new signal first; selecting STFT frames is the same up to the frames' seams);
- ``|STFT|^2`` (512 points) is summed into 15 third-octave bands from 150 Hz, and square-rooted;
- over every 30-frame segment, the reconstruction's band envelope is scaled to the original's
  energy, clipped at 15 dB above it, and correlated with it; STOI is the mean correlation.

``stoi(original, processed)`` agrees with ``pystoi.stoi`` to ~0.01 (tests); the loss is ``1 - stoi``.
"""

from __future__ import annotations

import torch

from burble.codecs.mel import SAMPLE_RATE

RATE = 10_000
FRAME = 256
FFT = 512
BANDS = 15
MIN_FREQUENCY = 150.0
SEGMENT = 30
CLIP = 10 ** (15 / 20)  # STOI's -15 dB SDR bound: the scaled envelope is clipped at (1 + CLIP) x the original's
DYNAMIC_RANGE = 40.0


def third_octave_bands() -> torch.Tensor:
    """``(15, 257)`` 0/1 matrix summing FFT bins into STOI's third-octave bands."""
    frequencies = torch.linspace(0, RATE, FFT + 1)[: FFT // 2 + 1]
    k = torch.arange(BANDS, dtype=torch.float64)
    low = MIN_FREQUENCY * 2.0 ** ((2 * k - 1) / 6)
    high = MIN_FREQUENCY * 2.0 ** ((2 * k + 1) / 6)
    bands = torch.zeros(BANDS, frequencies.numel())
    for b in range(BANDS):
        first = int(torch.argmin((frequencies - low[b]).abs()))
        last = int(torch.argmin((frequencies - high[b]).abs()))
        bands[b, first:last] = 1.0
    return bands


def _window() -> torch.Tensor:
    return torch.hann_window(FRAME + 2, periodic=False)[1:-1]


def stoi(original: torch.Tensor, processed: torch.Tensor, rate: int) -> torch.Tensor:
    """STOI of ``processed`` against ``original`` (both ``(samples,)`` at ``rate`` Hz), differentiable in ``processed``.

    Args:
        original: the clean reference signal.
        processed: the signal to score, the same length as ``original``.
        rate: their sample rate.
    """
    import torchaudio

    x = torchaudio.functional.resample(original.float(), rate, RATE)
    y = torchaudio.functional.resample(processed.float(), rate, RATE)
    window = _window()
    x_frames = x.unfold(0, FRAME, FRAME // 2) * window
    y_frames = y.unfold(0, FRAME, FRAME // 2) * window
    energy = 20 * torch.log10(x_frames.norm(dim=1) + 1e-12)
    keep = energy > energy.max() - DYNAMIC_RANGE
    x_frames, y_frames = x_frames[keep], y_frames[keep]
    if x_frames.shape[0] < SEGMENT:
        raise ValueError(f"{x_frames.shape[0]} loud frames: STOI needs at least {SEGMENT} (384 ms)")
    bands = third_octave_bands()
    x_env = (bands @ torch.fft.rfft(x_frames, FFT).abs().pow(2).T).sqrt()  # (bands, frames)
    y_env = (bands @ torch.fft.rfft(y_frames, FFT).abs().pow(2).T + 1e-12).sqrt()
    x_seg = x_env.unfold(1, SEGMENT, 1)  # (bands, segments, SEGMENT)
    y_seg = y_env.unfold(1, SEGMENT, 1)
    scale = x_seg.norm(dim=2, keepdim=True) / (y_seg.norm(dim=2, keepdim=True) + 1e-12)
    y_seg = torch.minimum(y_seg * scale, x_seg * (1 + CLIP))
    x_seg = x_seg - x_seg.mean(dim=2, keepdim=True)
    y_seg = y_seg - y_seg.mean(dim=2, keepdim=True)
    correlation = (x_seg * y_seg).sum(2) / (x_seg.norm(dim=2) * y_seg.norm(dim=2) + 1e-12)
    return correlation.mean()


class StoiLoss(torch.nn.Module):
    """``1 - STOI`` of decoded mels vocoded by a frozen vocoder, against the original audio.

    Args:
        vocoder: the HiFi-GAN the benchmark scores the codec with (frozen here).
        context: leading mel frames vocoded but not scored: the vocoder starts each window from
            silence, which the original audio did not.
        bfloat16: run the vocoder under bfloat16 autocast (2-3x faster on CPUs that have it; STOI
            reads only envelopes, which bfloat16 keeps).
    """

    def __init__(self, vocoder: torch.nn.Module, *, context: int = 16, bfloat16: bool = True) -> None:
        super().__init__()
        self.vocoder = vocoder.float().eval().requires_grad_(False)
        self.context = context
        self.bfloat16 = bfloat16

    def forward(self, decoded: torch.Tensor, audio: torch.Tensor, hop: int) -> torch.Tensor:
        """Mean ``1 - STOI`` over rows.

        Args:
            decoded: decoded log-mels ``(batch, 80, frames)``.
            audio: the original audio ``(batch, frames * hop)`` they came from.
            hop: audio samples per mel frame.
        """
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bfloat16):
            waves = self.vocoder(decoded)
        skip = self.context * hop
        scores = []
        for b in range(decoded.shape[0]):
            try:
                scores.append(stoi(audio[b, skip:], waves[b, skip:].float(), SAMPLE_RATE))
            except ValueError:  # a window of near silence: nothing for STOI to score
                continue
        return 1 - torch.stack(scores).mean() if scores else decoded.sum() * 0

