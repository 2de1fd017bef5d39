"""Residual vector quantisation: each book codes what the books before it left over.

Codebooks learn by exponential moving averages of the vectors assigned to each code (the
VQ-VAE-2 / SoundStream recipe) rather than by gradients; the encoder learns through a
straight-through estimator and a commitment loss. Three training details keep every code in use:
codebooks start from the first batch's own residuals, codes whose usage decays below a threshold
are re-seeded from the current batch, and *quantiser dropout* codes each training row with a random
number of books, so any prefix of 1..n books decodes.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn


class Quantized(NamedTuple):
    """``quantized``: the sum of the used books' vectors (straight-through in training);
    ``codes``: ``(rows, books)`` int64; ``commitment``: mean squared distance of the inputs to their codes."""

    quantized: torch.Tensor
    codes: torch.Tensor
    commitment: torch.Tensor


class ResidualVQ(nn.Module):
    """``num_books`` codebooks of ``codebook_size`` vectors of size ``dim``.

    Args:
        dim: vector size.
        num_books: books in the residual stack.
        codebook_size: codes per book.
        decay: EMA decay of the code statistics.
        dead_threshold: a code whose EMA usage (assignments per batch) falls below this is re-seeded.
    """

    def __init__(self, dim: int, num_books: int, codebook_size: int, *, decay: float = 0.99,
                 dead_threshold: float = 0.05) -> None:
        super().__init__()
        self.dim, self.num_books, self.codebook_size = dim, num_books, codebook_size
        self.decay, self.dead_threshold = decay, dead_threshold
        self.register_buffer("embed", torch.randn(num_books, codebook_size, dim) * 0.01)
        self.register_buffer("usage", torch.ones(num_books, codebook_size))
        self.register_buffer("embed_sum", self.embed.clone())
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))

    def forward(self, z: torch.Tensor, num_books: Optional[torch.Tensor | int] = None) -> Quantized:
        """Quantise rows ``z`` ``(rows, dim)`` with ``num_books`` books (an int, or one count per row)."""
        rows = z.shape[0]
        counts = torch.full((rows,), self.num_books, device=z.device) if num_books is None else (
            torch.full((rows,), int(num_books), device=z.device) if isinstance(num_books, int) else num_books)
        if self.training and not bool(self.initialized):
            self._initialize(z.detach())
        residual = z
        quantized = torch.zeros_like(z)
        codes = torch.zeros(rows, self.num_books, dtype=torch.long, device=z.device)
        commitment = z.new_zeros(())
        for book in range(self.num_books):
            active = counts > book
            if not bool(active.any()):
                break
            codebook = self.embed[book]
            index = self._nearest(residual.detach(), codebook)
            vectors = codebook[index]
            mask = active[:, None].to(z.dtype)
            if self.training:
                commitment = commitment + (F.mse_loss(residual, vectors.detach(), reduction="none").mean(1) * active).sum() / rows
                self._update(book, residual.detach()[active], index[active])
            quantized = quantized + vectors * mask
            residual = residual - vectors * mask
            codes[:, book] = index
        if self.training:
            quantized = z + (quantized - z).detach()
        return Quantized(quantized, codes, commitment)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """The vectors ``(rows, dim)`` for codes ``(rows, books)`` (any number of leading books)."""
        out = torch.zeros(codes.shape[0], self.dim, device=codes.device, dtype=self.embed.dtype)
        for book in range(codes.shape[1]):
            out = out + self.embed[book][codes[:, book]]
        return out

    def expected(self, distributions: torch.Tensor) -> torch.Tensor:
        """The expected vectors ``(rows, dim)`` for distributions over codes ``(rows, books, codebook_size)``:
        each book's codebook averaged under its distribution, summed over the (leading) books. A
        one-hot distribution gives ``decode`` of its code."""
        out = torch.zeros(distributions.shape[0], self.dim, device=distributions.device, dtype=self.embed.dtype)
        for book in range(distributions.shape[1]):
            out = out + distributions[:, book].to(self.embed.dtype) @ self.embed[book]
        return out

    @staticmethod
    def _nearest(x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
        distance = x.pow(2).sum(1, keepdim=True) - 2 * x @ codebook.t() + codebook.pow(2).sum(1)[None]
        return distance.argmin(1)

    @torch.no_grad()
    def _initialize(self, z: torch.Tensor) -> None:
        """Seed each book with residuals of the first batch (after the books before it)."""
        residual = z
        for book in range(self.num_books):
            pick = torch.randint(0, residual.shape[0], (self.codebook_size,), device=z.device)
            self.embed[book] = residual[pick]
            self.embed_sum[book] = residual[pick]
            residual = residual - self.embed[book][self._nearest(residual, self.embed[book])]
        self.usage.fill_(1.0)
        self.initialized.fill_(True)

    @torch.no_grad()
    def _update(self, book: int, x: torch.Tensor, index: torch.Tensor) -> None:
        if x.shape[0] == 0:
            return
        onehot = F.one_hot(index, self.codebook_size).to(x.dtype)
        self.usage[book].mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
        self.embed_sum[book].mul_(self.decay).add_(onehot.t() @ x, alpha=1 - self.decay)
        # Laplace smoothing keeps rarely used codes from dividing by ~0.
        n = self.usage[book].sum()
        smoothed = (self.usage[book] + 1e-5) / (n + self.codebook_size * 1e-5) * n
        self.embed[book] = self.embed_sum[book] / smoothed[:, None]
        dead = self.usage[book] < self.dead_threshold
        if bool(dead.any()):
            pick = torch.randint(0, x.shape[0], (int(dead.sum()),), device=x.device)
            self.embed[book][dead] = x[pick]
            self.embed_sum[book][dead] = x[pick]
            self.usage[book][dead] = 1.0

    def usage_fraction(self, codes: torch.Tensor) -> list[float]:
        """Per book, the fraction of its codes that occur in ``codes`` ``(rows, books)``."""
        return [float(torch.unique(codes[:, b]).numel()) / self.codebook_size for b in range(codes.shape[1])]
