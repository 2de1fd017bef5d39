"""The shared generation loop: plain AR decoding, and greedy speculative decoding being lossless.

The toy target (:class:`burble.testing.toy_models.TableModel`) reads its context back from the KV
cache, so a wrong rollback of rejected draft positions changes its outputs.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

import pytest
import torch

from burble.decoding.drafters import (
    ModelDrafter,
    PreviousHypothesisDrafter,
    PromptLookupDrafter,
)
from burble.decoding.generate import generate
from burble.decoding.kv_cache import KVCache
from burble.decoding.logits import SuppressAtBegin, SuppressTokens
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Draft, TargetRule
from burble.testing.toy_models import CountingModel, TableModel, sequence_distribution

V = 8
EOS = 0


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/decoding/conftest.py


def _target(seed: int = 3) -> TableModel:
    return TableModel(vocab_size=V, order=3, seed=seed, scale=2.0)


class _PenaliseRepeat:
    """Context-dependent processor: drafted positions must see the right prefix."""

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        logits[torch.arange(logits.shape[0]), tokens[:, -1]] -= 3.0


class _RandomDrafter:
    """Proposes uniformly random tokens: almost always rejected, exercising KV rollback."""

    def __init__(self, seed: int, vocab_size: int = V) -> None:
        self.rng = random.Random(seed)
        self.vocab_size = vocab_size

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        return Draft([self.rng.randrange(self.vocab_size) for _ in range(k)])


class _AdversarialDrafter:
    """Proposes a token that is never the target's argmax: every draft is rejected at position 0."""

    def __init__(self, target: TableModel) -> None:
        self.drafter = ModelDrafter(target)

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        draft = self.drafter.propose(tokens, k, rule)
        return Draft([(t + 1) % V for t in draft.tokens])


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, V) for _ in range(rng.randrange(1, 8))] for _ in range(n)]


def _run(model, prompt: list[int], options: DecodingOptions, **kwargs):
    return generate(model, torch.tensor([prompt]), options, **kwargs)


# --------------------------------------------------------------------------- plain decoding


def test_greedy_matches_brute_force_argmax_path():
    model = _target()
    for prompt in _prompts(10):
        expected = sequence_distribution(model, prompt, 6, temperature=0)
        assert len(expected) == 1
        assert tuple(_run(model, prompt, DecodingOptions(max_new_tokens=6)).tokens[0]) == next(iter(expected))


def test_eos_ends_generation_and_is_scored_but_not_returned():
    model = _target()
    options = DecodingOptions(max_new_tokens=30, eos_token_id=EOS)
    hits = 0
    for prompt in _prompts(20):
        result = _run(model, prompt, options)
        tokens = result.tokens[0]
        assert EOS not in tokens
        if result.finished[0]:
            hits += 1
            assert len(result.token_logprobs[0]) == len(tokens) + 1
        else:
            assert len(tokens) == 30 and len(result.token_logprobs[0]) == 30
        # The returned log-probs are those of the processed logits along the path.
        path = prompt + tokens + ([EOS] if result.finished[0] else [])
        logits = model.forward(torch.tensor([path]), model.new_cache(1, len(path)))[0]
        reference = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(
            1, torch.tensor(path[len(prompt) :])[:, None]
        )[:, 0]
        assert torch.allclose(torch.tensor(result.token_logprobs[0], dtype=torch.float64), reference)
    assert 0 < hits < 20  # both endings were exercised


@pytest.mark.parametrize("max_new_tokens", [0, 1, 2, 7])
def test_max_new_tokens_is_exact(max_new_tokens: int):
    result = _run(_target(), [1, 2], DecodingOptions(max_new_tokens=max_new_tokens))
    assert len(result.tokens[0]) == max_new_tokens
    assert result.finished == [False]


def test_batched_greedy_equals_row_by_row_with_rows_finishing_at_different_times():
    model = _target()
    options = DecodingOptions(max_new_tokens=12, eos_token_id=EOS)
    rng = random.Random(1)
    prompts = [[rng.randrange(1, V) for _ in range(3)] for _ in range(16)]
    batched = generate(model, torch.tensor(prompts), options)
    singles = [_run(model, p, options) for p in prompts]
    assert batched.tokens == [s.tokens[0] for s in singles]
    assert batched.finished == [s.finished[0] for s in singles]
    assert any(batched.finished) and not all(batched.finished)
    for b, s in zip(batched.token_logprobs, singles):
        assert b == pytest.approx(s.token_logprobs[0])


def test_batched_greedy_terminates_when_the_first_row_finishes_first():
    """Regression: the loop used to wait on row 0 only and overflowed the KV cache."""
    model = _target()
    options = DecodingOptions(max_new_tokens=10, eos_token_id=EOS)
    prompts = _prompts(200, seed=4)
    quick = next(p for p in prompts if _run(model, p, options).finished[0])
    slow = next(p for p in prompts if not _run(model, p, options).finished[0] and len(p) == len(quick))
    result = generate(model, torch.tensor([quick, slow]), options)
    assert result.finished == [True, False]
    assert len(result.tokens[1]) == 10


def test_probe_index_returns_raw_logits_at_that_position():
    model = _target()
    prompt = [3, 1, 4, 1, 5]
    logits = model.forward(torch.tensor([prompt]), model.new_cache(1, len(prompt)))[0]
    for index in (0, 2, 4):
        result = _run(model, prompt, DecodingOptions(max_new_tokens=3), probe_index=index)
        assert torch.equal(result.probe_logits[0], logits[index])


class _PrefillingModel:
    """A :class:`TableModel` that also implements ``prefill`` and records the rows it projects."""

    def __init__(self, model: TableModel) -> None:
        self.model, self.vocab_size, self.rows_asked = model, model.vocab_size, []

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        return self.model.new_cache(batch_size, max_length)

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        return self.model.forward(tokens, cache)

    def prefill(self, tokens: torch.Tensor, cache: KVCache, rows: list[int]) -> torch.Tensor:
        self.rows_asked.append(list(rows))
        return self.model.forward(tokens, cache)[:, rows]


def test_a_prefill_model_projects_only_the_probe_row_and_decodes_the_same():
    model = _target()
    prompt = [3, 1, 4, 1, 5]
    options = DecodingOptions(max_new_tokens=4)
    for index in (None, 0, 3, 4):  # 4 is the prompt's last token: not prefilled, the first pass reads it
        plain = _run(model, prompt, options, probe_index=index)
        wrapped = _PrefillingModel(model)
        result = _run(wrapped, prompt, options, probe_index=index)
        assert result.tokens == plain.tokens
        assert wrapped.rows_asked == [[index] if index is not None and index < len(prompt) - 1 else []]
        if index is not None:
            assert torch.equal(result.probe_logits, plain.probe_logits)


def test_bad_arguments_are_refused():
    model = _target()
    with pytest.raises(ValueError, match="beam"):
        generate(model, torch.tensor([[1]]), DecodingOptions(beam_size=2))
    with pytest.raises(ValueError, match="one drafter per row"):
        generate(model, torch.tensor([[1], [2]]), DecodingOptions(), drafter=PromptLookupDrafter())
    with pytest.raises(ValueError, match="3 drafters for 2 rows"):
        generate(model, torch.tensor([[1], [2]]), DecodingOptions(), drafter=[PromptLookupDrafter()] * 3)
    with pytest.raises(ValueError, match="forward_rows"):
        generate(CountingModel(model), torch.tensor([[1], [2]]), DecodingOptions(), drafter=[PromptLookupDrafter()] * 2)
    with pytest.raises(ValueError, match="at least one token"):
        generate(model, torch.zeros((1, 0), dtype=torch.long), DecodingOptions())


def test_sampling_is_reproducible_with_a_seeded_generator():
    model = _target()
    options = DecodingOptions(max_new_tokens=8, temperature=1.0, draft_length=3)

    def once(seed: int) -> list[int]:
        drafter = ModelDrafter(model.perturbed(1.0, seed=5), sample=True, generator=torch.Generator().manual_seed(1))
        return _run(model, [1, 2], options, drafter=drafter, generator=torch.Generator().manual_seed(seed)).tokens[0]

    assert once(0) == once(0)
    assert any(once(0) != once(s) for s in range(1, 6))


# --------------------------------------------------------------------------- lossless greedy speculation


def _drafters(model: TableModel, prompt: list[int], reference: list[int]):
    previous = reference[:3] + [(t + 1) % V for t in reference[3:5]] + reference[5:]  # a two-token slip
    return {
        "prompt-lookup": PromptLookupDrafter(),
        "prompt-lookup-hint": PromptLookupDrafter(ngram_max=2, hint_tokens=reference[::-1]),
        "previous": PreviousHypothesisDrafter(previous),
        "model-perfect": ModelDrafter(model, eos_token_id=EOS),
        "model-other": ModelDrafter(model.perturbed(1.5, seed=9), eos_token_id=EOS),
        "random": _RandomDrafter(seed=len(prompt)),
    }


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("eos", [None, EOS])
def test_greedy_speculation_returns_the_plain_greedy_output(k: int, eos):
    model = _target()
    processors = (_PenaliseRepeat(), SuppressTokens([7]), SuppressAtBegin([EOS], sample_begin=3))
    options = DecodingOptions(max_new_tokens=25, eos_token_id=eos, draft_length=k)
    accepted = 0
    for prompt in _prompts(8, seed=k):
        plain = _run(model, prompt, options, processors=processors)
        for name, drafter in _drafters(model, prompt, plain.tokens[0]).items():
            spec = _run(model, prompt, options, processors=processors, drafter=drafter)
            assert spec.tokens == plain.tokens, name
            assert spec.finished == plain.finished, name
            assert spec.token_logprobs[0] == pytest.approx(plain.token_logprobs[0]), name
            stats = spec.stats
            assert stats.generated == len(spec.tokens[0])
            assert stats.accepted <= stats.drafted <= k * stats.draft_rounds
            assert stats.target_passes <= plain.stats.target_passes
            assert all(a <= p for a, p in zip(stats.accepted_at, stats.proposed_at))
            # Acceptance at position i requires acceptance at every earlier position.
            assert all(x >= y for x, y in zip(stats.accepted_at, stats.accepted_at[1:]))
            accepted += stats.accepted
    assert accepted > 0


@pytest.mark.parametrize("n, k", [(10, 4), (11, 4), (12, 3), (7, 1), (5, 8)])
def test_perfect_drafter_needs_one_pass_per_k_plus_one_tokens(n: int, k: int):
    model = _target()
    options = DecodingOptions(max_new_tokens=n, draft_length=k)
    result = _run(model, [2, 5, 1], options, drafter=ModelDrafter(model))
    assert result.tokens == _run(model, [2, 5, 1], options).tokens
    stats = result.stats
    assert stats.target_passes == 1 + math.ceil(n / (k + 1))  # one prompt pass, then k + 1 tokens per pass
    assert stats.accepted == stats.drafted
    assert stats.acceptance_rate_at == [1.0] * min(k, n - 1)
    assert stats.mean_acceptance_length == pytest.approx(1 + stats.accepted / stats.draft_rounds)


def test_always_rejected_drafts_cost_one_pass_per_token():
    model = _target()
    options = DecodingOptions(max_new_tokens=15, draft_length=4)
    result = _run(model, [2, 5, 1], options, drafter=_AdversarialDrafter(model))
    assert result.tokens == _run(model, [2, 5, 1], options).tokens
    assert result.stats.accepted == 0 and result.stats.drafted > 0
    assert result.stats.target_passes == 1 + 15
    assert result.stats.mean_acceptance_length == 1.0
    assert all(rate == 0.0 for rate in result.stats.acceptance_rate_at)


def test_garbage_drafts_roll_back_the_kv_cache_exactly():
    model = _target()
    options = DecodingOptions(max_new_tokens=30, draft_length=6)
    for prompt in _prompts(20, seed=7):
        plain = _run(model, prompt, options)
        spec = _run(model, prompt, options, drafter=_RandomDrafter(seed=sum(prompt)))
        assert spec.tokens == plain.tokens
        assert spec.stats.drafted > 0


def test_the_rollback_test_catches_an_off_by_one_truncate(monkeypatch):
    """Negative control: keeping one rejected position in the cache must change the output."""
    model = _target()
    options = DecodingOptions(max_new_tokens=4, draft_length=6)
    prompts = _prompts(10, seed=7)
    plains = [_run(model, p, options).tokens for p in prompts]
    original = KVCache.truncate

    def keeps_one_stale_position(self, length: int) -> None:
        original(self, min(self.length, length + 1))

    monkeypatch.setattr(KVCache, "truncate", keeps_one_stale_position)
    specs = [_run(model, p, options, drafter=_RandomDrafter(seed=1)).tokens for p in prompts]
    assert specs != plains


def test_drafts_longer_than_k_or_the_remaining_budget_are_clipped():
    model = _target()

    class Greedy:
        def __init__(self) -> None:
            self.inner = ModelDrafter(model)

        def propose(self, tokens, k, rule):
            return Draft(self.inner.propose(tokens, k + 5, rule).tokens)  # ignores k

    for n in (1, 2, 5, 9):
        options = DecodingOptions(max_new_tokens=n, draft_length=3)
        result = _run(model, [4, 4], options, drafter=Greedy())
        assert result.tokens == _run(model, [4, 4], options).tokens
        assert all(p > 0 for p in result.stats.proposed_at) and len(result.stats.proposed_at) <= 3
