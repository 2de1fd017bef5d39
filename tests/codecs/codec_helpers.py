"""Helpers of the codec tests (``tests/codecs`` and ``tests/commands/test_codec_command.py``):
one torch thread, a throwaway codec with random weights, random cuts of a sequence.

The trained weights are not needed: every property tested with this codec (causality, streaming ==
whole, code ranges, input checks, the command line) holds for any weights. Its codebooks are drawn
at the scale of its encoder's latents so that every book's codes vary from frame to frame (drawn at
unit scale, books 2..8 would pick one code everywhere and the code tests would check little).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
JFK_WAV = ROOT / "examples" / "jfk.wav"


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """The tests share two cores with other work: torch computes on one thread, then is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_random_codec(path: Path, config=None, *, default_books: int = 4) -> Path:
    """A ``MelCodec`` (``config``, default ``CodecConfig()``: 21.5 Hz) with seeded random weights saved
    with ``save_codec`` (what ``load`` reads)."""
    from burble.audio.io import load_audio
    from burble.codecs.codec import save_codec
    from burble.codecs.mel import log_mel
    from burble.codecs.model import CodecConfig, MelCodec

    with one_thread(), torch.no_grad():
        torch.manual_seed(0)
        model = MelCodec(config or CodecConfig()).eval()
        mel = log_mel(load_audio(JFK_WAV, 22050))
        model.mel_mean.copy_(mel.mean(1, keepdim=True))
        model.mel_std.copy_(mel.std(1, keepdim=True))
        latent = model.encoder(((mel - model.mel_mean) / model.mel_std)[None])
        model.quantizer.embed.normal_().mul_(latent.std())
        save_codec(model, path, default_books=default_books)
    return path


def random_pieces(n: int, rng: np.random.Generator, largest: int) -> list[slice]:
    """``0..n`` cut at random into slices of 0..largest items (empty pieces included on purpose)."""
    pieces, start = [], 0
    while start < n:
        size = int(rng.integers(0, largest + 1))
        pieces.append(slice(start, start + size))
        start += size
    return pieces
