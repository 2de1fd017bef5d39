"""The mel codec: log-mel frames -> a few integer codes per frame -> log-mel frames.

    mel (80, 86.1 Hz) -> normalise -> causal conv encoder (2x down per stage) -> GRU -> project
      -> residual VQ (num_books x codebook_size)
      -> project -> GRU -> causal conv decoder (nearest 2x up per stage) -> mel

Every layer is causal (``burble.codecs.streaming``): a code frame depends only on the mel frames
up to its own last one, and a decoded mel frame only on the code frames up to its own. Decoding
emits the ``hop`` mel frames of a code frame as soon as that frame arrives, so the codec adds no
lookahead of its own. The frame rate is ``86.13 Hz / 2 ** down_stages`` (1 stage: 43 Hz, the
default codec ``mel-43hz``; 2 stages: 21.5 Hz, ``mel-21hz``), and with ``b`` books of ``2 ** k``
codes the bitrate is ``frame_rate * b * k`` (43 Hz, 2 books of 2048: 947 bit/s; 21.5 Hz, 4 books of
1024: 861 bit/s).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from burble.codecs.mel import HOP, N_MELS, SAMPLE_RATE
from burble.codecs.rvq import ResidualVQ
from burble.codecs.streaming import CausalConv1d, PointwiseConv1d, StreamingGRU


@dataclass(frozen=True)
class CodecConfig:
    """The codec's shape. ``channels`` lists the conv width at each rate, finest first;
    ``decoder_units`` is the number of residual units at each of the decoder's rates (dilations
    1, 3, 9, 1, 3, 9, ...; the encoder always has 2)."""

    down_stages: int = 2
    channels: tuple[int, ...] = (128, 192, 256)
    latent_dim: int = 128
    num_books: int = 8
    codebook_size: int = 1024
    decoder_units: int = 2

    @property
    def hop(self) -> int:
        """Mel frames per code frame."""
        return 2 ** self.down_stages

    @property
    def frame_rate(self) -> float:
        return SAMPLE_RATE / HOP / self.hop

    def bitrate(self, books: int) -> float:
        """Bits per second with the first ``books`` books."""
        return self.frame_rate * books * math.log2(self.codebook_size)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> "CodecConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in fields})


class ResidualUnit(nn.Module):
    """``x + conv1x1(gelu(causal_conv(gelu(x))))``."""

    def __init__(self, channels: int, dilation: int) -> None:
        super().__init__()
        self.conv = CausalConv1d(channels, channels, 3, dilation=dilation)
        self.mix = PointwiseConv1d(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[2] == 0:  # a streamed piece too short to reach this rate (1x1 convs refuse empty input)
            return x
        return x + self.mix(F.gelu(self.conv(F.gelu(x))))


def _stage(channels: int, units: int = 2) -> nn.Sequential:
    return nn.Sequential(*(ResidualUnit(channels, (1, 3, 9)[i % 3]) for i in range(units)))


class Encoder(nn.Module):
    def __init__(self, config: CodecConfig) -> None:
        super().__init__()
        ch = config.channels
        if len(ch) != config.down_stages + 1:
            raise ValueError(f"channels needs {config.down_stages + 1} entries, got {len(ch)}")
        layers: list[nn.Module] = [CausalConv1d(N_MELS, ch[0], 3), _stage(ch[0])]
        for i in range(config.down_stages):
            layers += [nn.GELU(), CausalConv1d(ch[i], ch[i + 1], 4, stride=2), _stage(ch[i + 1])]
        self.convs = nn.Sequential(*layers)
        self.gru = StreamingGRU(ch[-1])
        self.out = PointwiseConv1d(ch[-1], config.latent_dim)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.convs(mel)
        if x.shape[2] == 0:  # streaming: not yet a whole code frame
            return x.new_zeros(x.shape[0], self.out.out_channels, 0)
        return self.out(x + self.gru(x))


class Decoder(nn.Module):
    def __init__(self, config: CodecConfig) -> None:
        super().__init__()
        ch = config.channels
        self.inp = PointwiseConv1d(config.latent_dim, ch[-1])
        self.gru = StreamingGRU(ch[-1])
        units = config.decoder_units
        layers: list[nn.Module] = [_stage(ch[-1], units)]
        for i in reversed(range(config.down_stages)):
            layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.GELU(), CausalConv1d(ch[i + 1], ch[i], 3),
                       _stage(ch[i], units)]
        layers += [nn.GELU(), CausalConv1d(ch[0], N_MELS, 3)]
        self.convs = nn.Sequential(*layers)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        x = self.inp(latent)
        return self.convs(x + self.gru(x))


class CodecOutput(NamedTuple):
    mel: torch.Tensor
    codes: torch.Tensor
    commitment: torch.Tensor


class MelCodec(nn.Module):
    """Encoder + residual VQ + decoder over the vocoder's log-mel frames ``(batch, 80, frames)``.

    ``mel_mean``/``mel_std`` (per mel bin, from the training data) normalise the input and are
    undone on the output.
    """

    def __init__(self, config: CodecConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.quantizer = ResidualVQ(config.latent_dim, config.num_books, config.codebook_size)
        self.decoder = Decoder(config)
        self.register_buffer("mel_mean", torch.zeros(N_MELS, 1))
        self.register_buffer("mel_std", torch.ones(N_MELS, 1))

    def forward(self, mel: torch.Tensor, num_books: torch.Tensor | int | None = None) -> CodecOutput:
        """Reconstruct ``mel`` through the quantiser (training: ``num_books`` may vary per batch row)."""
        latent = self.encoder((mel - self.mel_mean) / self.mel_std)
        batch, dim, frames = latent.shape
        rows = latent.transpose(1, 2).reshape(-1, dim)
        if isinstance(num_books, torch.Tensor):
            num_books = num_books.repeat_interleave(frames)
        q = self.quantizer(rows, num_books)
        quantized = q.quantized.reshape(batch, frames, dim).transpose(1, 2)
        out = self.decoder(quantized) * self.mel_std + self.mel_mean
        return CodecOutput(out, q.codes.reshape(batch, frames, -1).transpose(1, 2), q.commitment)

    @torch.inference_mode()
    def encode(self, mel: torch.Tensor, num_books: int) -> torch.Tensor:
        """Codes ``(batch, num_books, mel_frames // hop)`` for mel ``(batch, 80, mel_frames)``."""
        dtype = next(self.encoder.parameters()).dtype  # the quantiser stays float32 (nearest codes)
        latent = self.encoder(((mel - self.mel_mean) / self.mel_std).to(dtype)).float()
        batch, dim, frames = latent.shape
        q = self.quantizer(latent.transpose(1, 2).reshape(-1, dim), num_books)
        return q.codes[:, :num_books].reshape(batch, frames, num_books).transpose(1, 2)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Mel ``(batch, 80, frames * hop)`` for codes ``(batch, books, frames)`` (1..num_books books),
        or for distributions over codes ``(batch, books, frames, codebook_size)`` (float): then each
        frame is decoded from its expected vector (``ResidualVQ.expected``)."""
        batch, books, frames = codes.shape[:3]
        if codes.is_floating_point():
            vectors = self.quantizer.expected(codes.transpose(1, 2).reshape(batch * frames, books, -1))
        else:
            vectors = self.quantizer.decode(codes.transpose(1, 2).reshape(-1, books))
        latent = vectors.reshape(batch, frames, -1).transpose(1, 2)
        dtype = next(self.decoder.parameters()).dtype
        return self.decoder(latent.to(dtype)).float() * self.mel_std + self.mel_mean
