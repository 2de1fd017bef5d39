"""``logits.sample_from``: the inverse-CDF sampler behind every sampling decision of the core."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from burble.decoding.logits import sample_from
from burble.testing.statistics import chi_square_gof

ALPHA = 1e-6


def _weights() -> torch.Tensor:
    # Unnormalised, with zeros at both ends and in the middle (a grammar or top-k mask).
    return torch.tensor([0.0, 3.0, 0.5, 0.0, 1.5, 2.0, 0.0, 0.25, 0.0], dtype=torch.float64)


def test_samples_follow_the_weights_and_never_a_zero():
    w = _weights()
    g = torch.Generator().manual_seed(0)
    draws = sample_from(w.expand(20_000, -1).contiguous(), g).tolist()
    exact = {i: float(p) for i, p in enumerate(w / w.sum())}
    result = chi_square_gof(Counter(draws), exact)
    assert result.unexpected == 0
    assert result.p_value > ALPHA


def test_a_sampler_off_by_one_is_rejected_by_the_same_test():
    # Negative control: right=False picks the token *before* the one whose mass holds u when the
    # weights have zeros, which the chi-square test must catch.
    w = _weights()
    g = torch.Generator().manual_seed(0)
    cdf = torch.cumsum(w, 0)
    u = torch.rand(20_000, generator=g, dtype=torch.float64) * cdf[-1]
    wrong = (torch.searchsorted(cdf, u, right=False) - 1).clamp(min=0).tolist()
    assert chi_square_gof(Counter(wrong), {i: float(p) for i, p in enumerate(w / w.sum())}).p_value < ALPHA


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 4, 7)])
def test_one_token_per_row_in_range_and_seeded(shape):
    probs = torch.softmax(torch.randn(shape), dim=-1)
    a = sample_from(probs, torch.Generator().manual_seed(3))
    b = sample_from(probs, torch.Generator().manual_seed(3))
    assert a.shape == shape[:-1] and a.dtype == torch.long
    assert torch.equal(a, b)
    assert bool(((a >= 0) & (a < shape[-1])).all())


def test_a_tiny_temperature_tends_to_the_argmax_instead_of_nan():
    """1e-222 is 0 in float32: dividing the logits by it gave NaN probabilities (and TTS with
    such a temperature no audio). The warped distribution is now the argmax's one-hot."""
    from burble.decoding.logits import warp

    logits = torch.tensor([[1.0, 2.0, 0.5, float("-inf")]])
    assert torch.isnan(torch.softmax(logits / 1e-222, dim=-1)).all()  # the premise
    assert torch.equal(warp(logits, temperature=1e-222), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    assert torch.allclose(warp(logits, temperature=0.7), torch.softmax(logits / 0.7, dim=-1))
