"""Verification rules and the statistical losslessness of speculative sampling.

The end-to-end statistical tests (marked slow: ~100 tiny torch ops per sample) draw 20,000
speculative samples of a length-4 continuation from a trigram toy target (fp64, CPU) with a
*different* draft model, and compare them with the exact distribution of every output sequence
(enumerated by brute force) by a chi-square goodness-of-fit test. A correct verifier fails with
probability 1e-6 per test; the negative controls (verifiers that misuse ``q``) must be rejected by
the very same test, which shows it has the power to catch a broken rule."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Optional

import pytest
import torch

import burble.decoding.generate as generate_module
from burble.decoding.drafters import ModelDrafter, PromptLookupDrafter
from burble.decoding.generate import generate
from burble.decoding.logits import SuppressAtBegin
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Drafter, verify_greedy, verify_sampling
from burble.decoding.stats import SpeculativeStats
from burble.testing.statistics import chi_square_gof
from burble.testing.toy_models import TableModel, sequence_distribution

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/decoding/conftest.py


SAMPLES = 20_000
LENGTH = 4
ALPHA = 1e-6  # a correct verifier fails one run in a million
STEP_SAMPLES = 5_000  # single verification steps: the wrong rule below is rejected at p ~ 1e-88


# --------------------------------------------------------------------------- verify_greedy


def test_verify_greedy_accepts_longest_matching_prefix_then_target_token():
    logits = torch.tensor([[0.0, 5.0, 1.0], [4.0, 0.0, 1.0], [0.0, 1.0, 3.0], [2.0, 9.0, 0.0]])
    # argmax per row: 1, 0, 2, 1
    assert verify_greedy([1, 0, 2], logits) == (3, 1)  # all accepted, bonus from the last row
    assert verify_greedy([1, 0, 0], logits[:4]) == (2, 2)  # mismatch at position 2 -> target's token
    assert verify_greedy([2, 0, 2], logits) == (0, 1)  # first token wrong: nothing accepted
    assert verify_greedy([], logits[:1]) == (0, 1)  # empty draft: plain greedy step


def test_verify_greedy_does_not_accept_after_a_mismatch():
    logits = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    # draft[1] is wrong; draft[2] would match row 2 but must not count
    assert verify_greedy([1, 1, 1], logits[:4]) == (1, 0)


# --------------------------------------------------------------------------- verify_sampling


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_verify_sampling_accepts_always_when_q_equals_p():
    p = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]], dtype=torch.float64)
    g = _gen()
    for _ in range(200):
        n, _ = verify_sampling([2, 0], p[:2], p, g)
        assert n == 2


def test_verify_sampling_never_accepts_or_emits_zero_probability_tokens():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.1, 0.8]], dtype=torch.float64)
    g = _gen()
    for _ in range(300):
        n, token = verify_sampling([2], q, p, g)
        assert n == 0 and token != 2
        n, token = verify_sampling([2], None, p, g)  # one-hot draft of an impossible token
        assert n == 0 and token != 2
        # An inconsistent q (zero for the token it drafted) is verified as one-hot, never trusted.
        n, token = verify_sampling([2], torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64), p, g)
        assert n == 0 and token != 2


def test_verify_sampling_one_hot_accepts_a_certain_token():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.3, 0.3, 0.4]], dtype=torch.float64)
    g = _gen()
    for _ in range(100):
        n, token = verify_sampling([1], None, p, g)
        assert n == 1 and token in (0, 1, 2)


def test_verify_sampling_empty_draft_samples_from_p():
    p = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    assert verify_sampling([], None, p, _gen()) == (0, 2)


def _one_step_output(draft_probs: Optional[torch.Tensor], p: torch.Tensor, draft_token: Callable[[], int], n: int):
    g = _gen(7)
    counts: Counter = Counter()
    for _ in range(n):
        x = draft_token()
        accepted, token = verify_sampling([x], draft_probs, p, g)
        counts[x if accepted else token] += 1
    return counts


@pytest.mark.parametrize("one_hot", [False, True])
def test_verify_sampling_first_token_is_distributed_as_p(one_hot: bool):
    p = torch.tensor([[0.05, 0.15, 0.3, 0.5], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.4, 0.4, 0.1, 0.1]], dtype=torch.float64)
    gq = _gen(3)
    counts = _one_step_output(
        None if one_hot else q, p, lambda: int(torch.multinomial(q[0], 1, generator=gq)), STEP_SAMPLES
    )
    result = chi_square_gof(counts, {i: float(p[0, i]) for i in range(4)})
    assert result.p_value > ALPHA, result


def test_verify_sampling_residual_without_q_is_caught_by_the_single_step_test():
    """Negative control of the test above: sampling the residual from p instead of max(0, p - q)."""
    p = torch.tensor([[0.05, 0.15, 0.3, 0.5], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.4, 0.4, 0.1, 0.1]], dtype=torch.float64)
    gq, g = _gen(3), _gen(7)
    counts: Counter = Counter()
    for _ in range(STEP_SAMPLES):
        x = int(torch.multinomial(q[0], 1, generator=gq))
        if float(torch.rand((), generator=g, dtype=torch.float64)) < min(1.0, float(p[0, x] / q[0, x])):
            counts[x] += 1
        else:
            counts[int(torch.multinomial(p[0], 1, generator=g))] += 1
    assert chi_square_gof(counts, {i: float(p[0, i]) for i in range(4)}).p_value < ALPHA


# --------------------------------------------------------------------------- end-to-end lossless sampling


def _target() -> TableModel:
    return TableModel(vocab_size=6, order=3, seed=11, scale=1.5)


def _draft_model() -> TableModel:
    # Correlated with the target but clearly different (acceptance rate well below 1).
    return _target().perturbed(noise=1.5, seed=12)


def _greedy(prompt: list[int], n: int) -> list[int]:
    return generate(_target(), torch.tensor([prompt]), DecodingOptions(max_new_tokens=n)).tokens[0]


# The target's own greedy continuation: copy-based drafters then propose plausible tokens (and the
# prompt-lookup drafter finds repeated n-grams in it).
PROMPT = [1, 4] + _greedy([1, 4], 8)


class _SoftBanRepeat:
    """Context-dependent processor: penalise repeating the previous token."""

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        logits[torch.arange(logits.shape[0]), tokens[:, -1]] -= 1.0


def _speculative_counts(
    drafter: Drafter, options: DecodingOptions, processors=(), n: int = SAMPLES, seed: int = 0
) -> tuple[Counter, SpeculativeStats]:
    target = _target()
    g = torch.Generator().manual_seed(seed)
    prompt = torch.tensor([PROMPT])
    counts: Counter = Counter()
    stats = SpeculativeStats()
    for _ in range(n):
        result = generate(target, prompt, options, processors=processors, drafter=drafter, generator=g)
        key = tuple(result.tokens[0]) + ((options.eos_token_id,) if result.finished[0] else ())
        counts[key] += 1
        stats.merge(result.stats)
    return counts, stats


def _exact(options: DecodingOptions, processors=()) -> dict:
    return sequence_distribution(
        _target(),
        PROMPT,
        options.max_new_tokens,
        temperature=options.temperature,
        top_k=options.top_k,
        top_p=options.top_p,
        processors=processors,
        eos_token_id=options.eos_token_id,
    )


def _sampling_drafter(kind: str) -> Drafter:
    gd = torch.Generator().manual_seed(99)
    if kind == "model-q":
        return ModelDrafter(_draft_model(), sample=True, generator=gd)
    if kind == "model-one-hot":
        return ModelDrafter(_draft_model(), sample=True, generator=gd, return_probs=False)
    if kind == "prompt-lookup":
        return PromptLookupDrafter(ngram_max=2, ngram_min=1)
    raise AssertionError(kind)


def _assert_drafts_were_exercised(stats, options: DecodingOptions) -> None:
    # A test where drafts are never proposed, never accepted or never rejected proves nothing.
    assert stats.drafted >= SAMPLES
    rate = stats.accepted / stats.drafted
    assert 0.1 < rate < 0.9, rate


BASE = DecodingOptions(max_new_tokens=LENGTH, temperature=1.0, draft_length=3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["model-q", "model-one-hot", "prompt-lookup"])
def test_speculative_sampling_is_lossless(kind: str):
    """With q (a sampling draft model), and one-hot: copied tokens, or sampled tokens whose q is
    dropped (verifying a sampled token as one-hot is lossless too: acceptance p(x) and the residual
    p without x give exactly p whatever proposed x)."""
    counts, stats = _speculative_counts(_sampling_drafter(kind), BASE)
    _assert_drafts_were_exercised(stats, BASE)
    result = chi_square_gof(counts, _exact(BASE))
    assert result.p_value > ALPHA, result


@pytest.mark.slow
def test_speculative_sampling_with_q_is_lossless_under_warpers_and_processors():
    """Temperature != 1, top-k, top-p, a context-dependent processor, end-of-sequence."""
    options = DecodingOptions(
        max_new_tokens=LENGTH, temperature=0.8, top_k=5, top_p=0.95, eos_token_id=0, draft_length=3
    )
    processors = (_SoftBanRepeat(), SuppressAtBegin([5], sample_begin=len(PROMPT)))
    drafter = ModelDrafter(_draft_model(), sample=True, generator=_gen(99), eos_token_id=0)
    counts, stats = _speculative_counts(drafter, options, processors)
    _assert_drafts_were_exercised(stats, options)
    exact = _exact(options, processors)
    assert any(key[-1] == 0 for key in exact)  # end-of-sequence outcomes are part of the test
    result = chi_square_gof(counts, exact)
    assert result.p_value > ALPHA, result


def test_plain_sampling_matches_the_exact_distribution():
    """The enumerator and the plain AR sampler agree (batched: one call draws all samples)."""
    g = torch.Generator().manual_seed(5)
    prompt = torch.tensor([PROMPT]).expand(SAMPLES, -1).contiguous()
    result = generate(_target(), prompt, BASE, generator=g)
    result_check = chi_square_gof(Counter(tuple(t) for t in result.tokens), _exact(BASE))
    assert result_check.p_value > ALPHA, result_check


# --------------------------------------------------------------------------- negative controls


def _wrong_q_uniform(draft, draft_probs, target_probs, generator=None):
    """Right formula, wrong q: a uniform distribution instead of the drafter's."""
    if draft_probs is not None:
        draft_probs = torch.full_like(draft_probs, 1.0 / draft_probs.shape[-1])
    return verify_sampling(draft, draft_probs, target_probs, generator)


def _residual_ignores_q(draft, draft_probs, target_probs, generator=None):
    """Accepts with min(1, p/q) but samples a rejection from p instead of max(0, p - q)."""
    for j, x in enumerate(draft):
        p = target_probs[j]
        qx = 1.0 if draft_probs is None else float(draft_probs[j, x])
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if u < min(1.0, float(p[x]) / qx):
            continue
        return j, int(torch.multinomial(p, 1, generator=generator))
    return len(draft), int(torch.multinomial(target_probs[len(draft)], 1, generator=generator))


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, wrong_verifier",
    [
        ("model-q", _wrong_q_uniform),
        ("model-q", _residual_ignores_q),
        ("prompt-lookup", _residual_ignores_q),  # one-hot: the residual keeps the rejected token
    ],
)
def test_wrong_verifier_is_rejected(monkeypatch, kind: str, wrong_verifier):
    monkeypatch.setattr(generate_module, "verify_sampling", wrong_verifier)
    counts, _ = _speculative_counts(_sampling_drafter(kind), BASE)
    result = chi_square_gof(counts, _exact(BASE))
    assert result.p_value < ALPHA, result
