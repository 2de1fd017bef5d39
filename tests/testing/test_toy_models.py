"""The toy models and the goodness-of-fit helper that the decoding tests rely on."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from burble.decoding.logits import SuppressTokens, warp
from burble.testing.statistics import chi_square_gof
from burble.testing.toy_models import TableModel, sequence_distribution


def test_incremental_forward_equals_one_full_pass():
    model = TableModel(vocab_size=7, order=3, seed=1)
    tokens = torch.tensor([[1, 5, 2, 2, 6, 0, 3], [4, 4, 1, 0, 2, 5, 6]])
    full = model.forward(tokens, model.new_cache(2, 10))
    cache = model.new_cache(2, 10)
    chunks = [model.forward(tokens[:, a:b], cache) for a, b in ((0, 1), (1, 4), (4, 5), (5, 7))]
    assert torch.equal(torch.cat(chunks, dim=1), full)
    assert cache.length == 7


def test_logits_follow_the_ngram_table():
    model = TableModel(vocab_size=5, order=3, seed=2)
    logits = model.forward(torch.tensor([[3, 1, 4]]), model.new_cache(1, 3))[0]
    pad = 5
    assert torch.equal(logits[0], model.table[pad, 3])
    assert torch.equal(logits[1], model.table[3, 1])
    assert torch.equal(logits[2], model.table[1, 4])


def test_the_context_is_read_from_the_cache():
    """Overwriting a cached position (a missed rollback) changes what the model predicts."""
    model = TableModel(vocab_size=6, order=3, seed=3)
    rolled_back, forgotten = model.new_cache(1, 8), model.new_cache(1, 8)
    for cache in (rolled_back, forgotten):
        model.forward(torch.tensor([[1, 2, 3]]), cache)  # "3" is a rejected draft token
    rolled_back.truncate(2)
    good = model.forward(torch.tensor([[4]]), rolled_back)
    bad = model.forward(torch.tensor([[4]]), forgotten)
    assert torch.equal(good[0, 0], model.table[2, 4])
    assert torch.equal(bad[0, 0], model.table[3, 4])
    assert not torch.equal(good, bad)


def test_bad_tokens_are_refused():
    model = TableModel(vocab_size=4, order=2)
    with pytest.raises(ValueError, match="token ids"):
        model.forward(torch.tensor([[4]]), model.new_cache(1, 2))
    with pytest.raises(ValueError, match="batch"):
        model.forward(torch.tensor([[1]]), model.new_cache(2, 2))
    with pytest.raises(ValueError, match="shape"):
        TableModel(vocab_size=4, order=2, table=torch.zeros(4, 4))


def test_sequence_distribution_is_exact():
    model = TableModel(vocab_size=4, order=2, seed=5)
    dist = sequence_distribution(model, [1], 3, temperature=0.7)
    assert len(dist) == 4**3 and math.isclose(sum(dist.values()), 1.0, rel_tol=1e-12)
    # One path by hand: product of the warped bigram rows.
    probs = warp(model.table, temperature=0.7)
    expected = float(probs[1, 2] * probs[2, 0] * probs[0, 3])
    assert dist[(2, 0, 3)] == pytest.approx(expected, rel=1e-12)


def test_sequence_distribution_with_eos_processors_and_top_k():
    model = TableModel(vocab_size=5, order=3, seed=6)
    dist = sequence_distribution(model, [1, 2], 3, top_k=3, processors=[SuppressTokens([4])], eos_token_id=0)
    assert math.isclose(sum(dist.values()), 1.0, rel_tol=1e-12)
    assert all(4 not in key for key in dist)
    assert all(0 not in key[:-1] for key in dist)  # eos only ever ends a sequence
    assert any(len(key) < 3 for key in dist)
    greedy = sequence_distribution(model, [1, 2], 3, temperature=0)
    assert list(greedy.values()) == [1.0]


def test_chi_square_accepts_exact_samples_and_rejects_wrong_ones():
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.04, 0.01], dtype=torch.float64)
    exact = {i: float(p) for i, p in enumerate(probs)}
    good = Counter(torch.multinomial(probs, 5000, replacement=True, generator=g).tolist())
    assert chi_square_gof(good, exact).p_value > 1e-6
    skewed = probs.clone()
    skewed[0], skewed[1] = 0.45, 0.25
    bad = Counter(torch.multinomial(skewed, 5000, replacement=True, generator=g).tolist())
    assert chi_square_gof(bad, exact).p_value < 1e-6


def test_chi_square_merges_rare_cells_and_fails_on_impossible_outcomes():
    exact = {"a": 0.9, "b": 0.0999, "c": 0.0001}
    result = chi_square_gof({"a": 900, "b": 100}, exact)
    assert result.cells == 2  # "c" (expected 0.1) was pooled
    assert chi_square_gof({"a": 900, "b": 99, "z": 1}, exact).p_value == 0.0
    with pytest.raises(ValueError):
        chi_square_gof({"a": 1}, {"a": 0.5})
