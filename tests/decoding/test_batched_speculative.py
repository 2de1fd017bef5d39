"""Batched speculative decoding: each row drafts and accepts its own number of tokens.

The rows of one ``generate`` call then stand at different lengths (ragged acceptance) and one
pass verifies all of them from their own positions (``forward_rows``). Greedy output must be
token-identical to plain batched greedy decoding, and sampled output must keep the target's
exact distribution (chi-square against the enumerated distribution, with a negative control).
The toy model reads each position's context back from the cache, so a row written or read at
the wrong position changes its output.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import pytest
import torch

import burble.decoding.generate as generate_module
from burble.decoding.drafters import ModelDrafter, PromptLookupDrafter
from burble.decoding.generate import generate
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Draft, TargetRule, verify_sampling
from burble.decoding.stats import SpeculativeStats
from burble.testing.statistics import chi_square_gof
from burble.testing.toy_models import TableModel, sequence_distribution

SAMPLES = 20_000
ROWS = 8
LENGTH = 4
ALPHA = 1e-6


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/decoding/conftest.py


def _target() -> TableModel:
    return TableModel(vocab_size=6, order=3, seed=11, scale=1.5)


class _FixedDrafter:
    """Always proposes the same tokens (accepted only where they happen to be right)."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        return Draft(self.tokens[:k])


class _CountingRows:
    """Counts the passes that ran rows at different positions."""

    def __init__(self, model: TableModel) -> None:
        self.model, self.vocab_size, self.ragged_passes = model, model.vocab_size, 0

    def new_cache(self, batch_size: int, max_length: int):
        return self.model.new_cache(batch_size, max_length)

    def forward(self, tokens, cache):
        return self.model.forward(tokens, cache)

    def forward_rows(self, tokens, cache, starts):
        self.ragged_passes += 1
        return self.model.forward_rows(tokens, cache, starts)


def _row_drafters() -> list:
    """Drafters of every quality: a correlated model, copies, fixed guesses, nothing."""
    draft_model = _target().perturbed(noise=1.0, seed=12)
    return [
        ModelDrafter(draft_model), PromptLookupDrafter(ngram_max=2), _FixedDrafter([0, 1, 2, 3]),
        ModelDrafter(_target()), _FixedDrafter([]), ModelDrafter(draft_model), PromptLookupDrafter(),
        _FixedDrafter([5, 5, 5]),
    ]  # fmt: skip


PROMPTS = torch.tensor([[1, 4, 2], [0, 0, 1], [3, 5, 5], [2, 2, 2], [4, 1, 0], [5, 3, 1], [1, 1, 4], [0, 5, 3]])


@pytest.mark.parametrize("eos", [None, 0])
def test_ragged_greedy_is_token_identical_to_plain_batched_greedy(eos):
    options = DecodingOptions(max_new_tokens=24, draft_length=4, eos_token_id=eos)
    plain = generate(_target(), PROMPTS, options)
    model = _CountingRows(_target())
    speculative = generate(model, PROMPTS, options, drafter=_row_drafters())
    assert speculative.tokens == plain.tokens
    assert speculative.finished == plain.finished
    for ours, theirs in zip(speculative.token_logprobs, plain.token_logprobs):
        assert ours == pytest.approx(theirs)
    # The drafts were used (a batch takes as many passes as its slowest row: the one that
    # drafts nothing) and the rows really stood apart: most passes were ragged.
    assert speculative.stats.accepted > 0 and speculative.stats.accepted < speculative.stats.drafted
    assert model.ragged_passes >= speculative.stats.target_passes // 2


def test_a_row_batch_agrees_with_each_row_decoded_alone():
    options = DecodingOptions(max_new_tokens=16, draft_length=3)
    batched = generate(_target(), PROMPTS, options, drafter=_row_drafters())
    for b, drafter in enumerate(_row_drafters()):
        alone = generate(_target(), PROMPTS[b : b + 1], options, drafter=drafter)
        assert alone.tokens[0] == batched.tokens[b]


def test_rows_written_at_one_shared_position_are_caught(monkeypatch):
    """Negative control: a model that ignores the rows' own positions (writes every row where the
    longest one stands) changes the output, so the identity test above can fail."""
    options = DecodingOptions(max_new_tokens=24, draft_length=4)
    plain = generate(_target(), PROMPTS, options)

    right = TableModel.forward_rows

    def shared_position(self, tokens, cache, starts):
        return right(self, tokens, cache, torch.full_like(starts, int(starts.max())))

    monkeypatch.setattr(TableModel, "forward_rows", shared_position)
    wrong = generate(_target(), PROMPTS, options, drafter=_row_drafters())
    assert wrong.tokens != plain.tokens


# ----------------------------------------------------------------------------- sampling


PROMPT = [1, 4, 2, 5]
SAMPLING = DecodingOptions(max_new_tokens=LENGTH, temperature=1.0, draft_length=3)


def _batched_counts(n: int = SAMPLES, seed: int = 0) -> tuple[Counter, SpeculativeStats]:
    """``n`` samples in batches of ``ROWS`` rows, each row with its own sampling draft model (q)."""
    target, draft_model = _target(), _target().perturbed(noise=1.5, seed=12)
    g, gd = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(99)
    prompt = torch.tensor([PROMPT] * ROWS)
    counts: Counter = Counter()
    stats = SpeculativeStats()
    for _ in range(n // ROWS):
        drafters = [ModelDrafter(draft_model, sample=True, generator=gd) for _ in range(ROWS)]
        result = generate(target, prompt, SAMPLING, drafter=drafters, generator=g)
        counts.update(tuple(row) for row in result.tokens)
        stats.merge(result.stats)
    return counts, stats


def _exact() -> dict:
    return sequence_distribution(_target(), PROMPT, LENGTH, temperature=1.0)


@pytest.mark.slow
def test_batched_speculative_sampling_is_lossless():
    counts, stats = _batched_counts()
    rate = stats.accepted / stats.drafted
    assert stats.drafted >= SAMPLES and 0.1 < rate < 0.9, rate  # drafts accepted and rejected
    result = chi_square_gof(counts, _exact())
    assert result.p_value > ALPHA, result


def _residual_ignores_q(draft, draft_probs, target_probs, generator=None):
    """Accepts with min(1, p/q) but samples a rejection from p instead of max(0, p - q)."""
    for j, x in enumerate(draft):
        p = target_probs[j]
        if float(torch.rand((), generator=generator, dtype=torch.float64)) < min(1.0, float(p[x] / draft_probs[j, x])):
            continue
        return j, int(torch.multinomial(p, 1, generator=generator))
    return len(draft), verify_sampling([], None, target_probs[len(draft) :], generator)[1]


@pytest.mark.slow
def test_batched_wrong_verifier_is_rejected(monkeypatch):
    """Negative control: the same test catches a verifier that ignores q in its residual."""
    monkeypatch.setattr(generate_module, "verify_sampling", _residual_ignores_q)
    counts, _ = _batched_counts()
    result = chi_square_gof(counts, _exact())
    assert result.p_value < ALPHA, result


# ----------------------------------------------------------------------------- rows of different streams


def test_rows_with_prompts_processors_and_probes_of_their_own_match_each_row_alone():
    """Rows of different streams: prompts of different lengths (right-padded), a processor chain
    and a probe position each, with and without drafts: each row as if decoded alone."""
    from burble.decoding.logits import SuppressAtBegin

    prompts = [[1, 4, 2, 5, 0], [3], [0, 0, 1], [2, 2, 2, 2, 2, 4, 1]]
    width = max(len(p) for p in prompts)
    padded = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    chains = [(SuppressAtBegin([b], sample_begin=len(p)),) for b, p in enumerate(prompts)]
    probes = [len(p) - 1 for p in prompts]  # each row's last prompt position
    options = DecodingOptions(max_new_tokens=12, draft_length=3, eos_token_id=5)
    for drafters in (None, [ModelDrafter(_target()), _FixedDrafter([0, 1]), PromptLookupDrafter(), _FixedDrafter([])]):
        batched = generate(
            _target(), padded, options, prompt_lengths=[len(p) for p in prompts], row_processors=chains,
            probe_index=probes, drafter=drafters,
        )  # fmt: skip
        for b, prompt in enumerate(prompts):
            alone = generate(_target(), torch.tensor([prompt]), options, processors=chains[b], probe_index=probes[b])
            assert batched.tokens[b] == alone.tokens[0], (b, drafters is not None)
            assert batched.finished[b] == alone.finished[0]
            assert torch.equal(batched.probe_logits[b], alone.probe_logits[0])


def test_prompts_of_different_lengths_are_refused_without_forward_rows():
    from burble.testing.toy_models import CountingModel

    with pytest.raises(ValueError, match="forward_rows"):
        generate(CountingModel(_target()), torch.tensor([[1, 2], [3, 0]]), DecodingOptions(), prompt_lengths=[2, 1])
    with pytest.raises(ValueError, match="one chain per row"):
        generate(_target(), torch.tensor([[1, 2], [3, 0]]), DecodingOptions(), row_processors=[()])


@pytest.mark.parametrize("drafted", [False, True], ids=["plain", "ragged drafts"])
def test_rows_with_their_own_token_limits_stop_where_each_stops_alone(drafted):
    """``row_max_new_tokens``: a stream caps its decode by its audio's length; each row of a batch
    stops at its own cap exactly as it does decoded alone with that cap."""
    limits = [1, 7, 0, 12, 3, 16, 5, 9]
    options = DecodingOptions(max_new_tokens=16, draft_length=3)
    drafters = _row_drafters() if drafted else None
    batched = generate(_target(), PROMPTS, options, drafter=drafters, row_max_new_tokens=limits)
    for b, limit in enumerate(limits):
        alone = generate(_target(), PROMPTS[b : b + 1], DecodingOptions(max_new_tokens=limit, draft_length=3),
                         drafter=_row_drafters()[b] if drafted else None)  # fmt: skip
        assert batched.tokens[b] == alone.tokens[0] and len(batched.tokens[b]) == limit
    with pytest.raises(ValueError, match="row_max_new_tokens"):
        generate(_target(), PROMPTS, options, row_max_new_tokens=[17] * ROWS)
