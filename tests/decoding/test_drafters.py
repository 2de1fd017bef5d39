"""Drafters: what they propose, and how the model drafter keeps its KV cache in sync."""

from __future__ import annotations

from typing import Sequence

import pytest
import torch

from burble.decoding.drafters import (
    ModelDrafter,
    PreviousHypothesisDrafter,
    PromptLookupDrafter,
)
from burble.decoding.generate import generate
from burble.decoding.logits import warp
from burble.decoding.options import DecodingOptions
from burble.testing.toy_models import CountingModel, TableModel


def greedy_rule(logits: torch.Tensor, prefix: Sequence[int]) -> torch.Tensor:
    return logits


def sampling_rule(logits: torch.Tensor, prefix: Sequence[int]) -> torch.Tensor:
    return warp(logits, temperature=1.0)


# --------------------------------------------------------------------------- prompt lookup


def test_prompt_lookup_copies_what_followed_the_most_recent_match():
    drafter = PromptLookupDrafter(ngram_max=3, ngram_min=1)
    #         0  1  2  3  4  5  6  7  8  9
    tokens = [5, 1, 2, 9, 9, 1, 2, 7, 8, 1, 2]
    # "1 2" occurs at 1 and 5; the most recent earlier one (5) is followed by 7 8 1 2
    assert drafter.propose(tokens, 3, greedy_rule).tokens == [7, 8, 1]
    assert drafter.propose(tokens, 10, greedy_rule).tokens == [7, 8, 1, 2]  # up to the end of the context


def test_prompt_lookup_prefers_the_longest_ngram():
    drafter = PromptLookupDrafter(ngram_max=3)
    # the 1-gram "3" last occurred at 6 (-> 4), but the 3-gram "1 2 3" at 0 (-> 9) wins
    tokens = [1, 2, 3, 9, 0, 0, 3, 4, 5, 1, 2, 3]
    assert drafter.propose(tokens, 2, greedy_rule).tokens == [9, 0]
    assert PromptLookupDrafter(ngram_max=1).propose(tokens, 2, greedy_rule).tokens == [4, 5]


def test_prompt_lookup_uses_the_hint_and_respects_ngram_min():
    hint = [7, 3, 4, 6, 6]
    drafter = PromptLookupDrafter(ngram_max=2, ngram_min=2, hint_tokens=hint)
    assert drafter.propose([1, 2, 3, 4], 2, greedy_rule).tokens == [6, 6]  # "3 4" found in the hint
    assert drafter.propose([1, 2, 0, 4], 2, greedy_rule).tokens == []  # only a 1-gram would match
    assert PromptLookupDrafter().propose([1, 2, 3], 4, greedy_rule).tokens == []  # nothing repeats
    assert PromptLookupDrafter().propose([1, 2, 1], 0, greedy_rule).tokens == []


@pytest.mark.parametrize("args", [(0, 1), (2, 3), (1, 0)])
def test_prompt_lookup_rejects_bad_ngram_sizes(args):
    ngram_max, ngram_min = args
    with pytest.raises(ValueError):
        PromptLookupDrafter(ngram_max=ngram_max, ngram_min=ngram_min)


# --------------------------------------------------------------------------- previous hypothesis


def test_previous_hypothesis_continues_a_matching_prefix():
    drafter = PreviousHypothesisDrafter([10, 11, 12, 13, 14])
    prompt = [1, 2, 3]
    assert drafter.propose(prompt, 3, greedy_rule).tokens == [10, 11, 12]  # first call marks the prompt
    assert drafter.propose(prompt + [10, 11], 2, greedy_rule).tokens == [12, 13]
    assert drafter.propose(prompt + [10, 11, 12, 13, 14], 2, greedy_rule).tokens == []


def test_previous_hypothesis_resynchronises_after_a_divergence():
    previous = [10, 11, 12, 13, 14, 15, 16]
    drafter = PreviousHypothesisDrafter(previous, prompt_length=2)
    # substitution 12 -> 20, then the target came back to 13: continue after 13
    assert drafter.propose([1, 2, 10, 11, 20, 13], 2, greedy_rule).tokens == [14, 15]
    # an insertion of unseen tokens 21 22: nothing to re-synchronise on
    assert drafter.propose([1, 2, 10, 11, 12, 13, 14, 21, 22], 2, greedy_rule).tokens == []
    # deletion of 12: the last token 13 is found
    assert drafter.propose([1, 2, 10, 11, 13], 3, greedy_rule).tokens == [14, 15, 16]


def test_previous_hypothesis_prefers_the_occurrence_nearest_the_current_position():
    previous = [7, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    drafter = PreviousHypothesisDrafter(previous, prompt_length=1, resync_ngram=1)
    # 7 occurs at 0 and 7; after 8 generated tokens the one at 7 is nearer
    assert drafter.propose([0, 1, 2, 3, 4, 5, 6, 0, 7], 2, greedy_rule).tokens == [8, 9]
    assert drafter.propose([0, 5, 7], 2, greedy_rule).tokens == [1, 2]


def test_previous_hypothesis_detects_a_new_decode():
    drafter = PreviousHypothesisDrafter([10, 11, 12])
    assert drafter.propose([1, 2, 3], 1, greedy_rule).tokens == [10]
    assert drafter.propose([1, 2, 3, 10], 1, greedy_rule).tokens == [11]
    # a new, shorter prompt: generation restarts there
    assert drafter.propose([4, 5], 2, greedy_rule).tokens == [10, 11]
    assert drafter.propose([4, 5, 10, 11], 2, greedy_rule).tokens == [12]


def test_previous_hypothesis_drafts_most_of_a_re_decode():
    """The streaming use: a re-decode whose output mostly equals the last partial hypothesis."""
    model = TableModel(vocab_size=8, order=3, seed=2)
    options = DecodingOptions(max_new_tokens=20, draft_length=4)
    prompt = torch.tensor([[1, 2]])
    plain = generate(model, prompt, options)
    previous = plain.tokens[0][:12]
    previous[6] = (previous[6] + 1) % 8  # a mid-sentence correction
    spec = generate(model, prompt, options, drafter=PreviousHypothesisDrafter(previous))
    assert spec.tokens == plain.tokens
    assert spec.stats.target_passes < plain.stats.target_passes
    assert spec.stats.accepted >= 8


# --------------------------------------------------------------------------- model drafter


def test_model_drafter_with_the_target_as_draft_model_proposes_the_greedy_continuation():
    model = TableModel(vocab_size=8, order=3, seed=4)
    drafter = ModelDrafter(model)
    reference = generate(model, torch.tensor([[3, 1]]), DecodingOptions(max_new_tokens=6)).tokens[0]
    assert drafter.propose([3, 1], 6, greedy_rule).tokens == reference
    assert drafter.propose([3, 1] + reference[:2], 3, greedy_rule).tokens == reference[2:5]


def test_model_drafter_feeds_only_what_its_cache_lacks():
    model = CountingModel(TableModel(vocab_size=8, order=3, seed=4))
    drafter = ModelDrafter(model)
    context = [3, 1, 4, 1, 5]
    draft = drafter.propose(context, 4, greedy_rule).tokens
    assert model.tokens_fed == len(context) + 3  # the prompt, then each draft token but the last
    # All four accepted plus a bonus token: only the last draft token and the bonus are new.
    model.tokens_fed = 0
    drafter.propose(context + draft + [0], 4, greedy_rule)
    assert model.tokens_fed == 2 + 3
    # Rejected at position 1: the cache keeps context + draft[0] and feeds the correction token.
    model.tokens_fed = 0
    accepted = context + draft + [0]
    drafter2 = ModelDrafter(model)
    first = drafter2.propose(accepted, 4, greedy_rule).tokens
    model.tokens_fed = 0
    drafter2.propose(accepted + first[:1] + [(first[1] + 1) % 8], 2, greedy_rule)
    assert model.tokens_fed == 1 + 1
    assert drafter2.cache.length == len(accepted) + 2 + 1


def test_model_drafter_grows_its_cache_and_honours_max_length():
    model = TableModel(vocab_size=8, order=2, seed=1)
    drafter = ModelDrafter(model)
    long = [i % 7 + 1 for i in range(300)]
    drafter.propose(long[:10], 4, greedy_rule)
    capacity = drafter.cache.max_length
    draft = drafter.propose(long, 4, greedy_rule).tokens
    assert len(draft) == 4 and drafter.cache.max_length >= 304 > capacity
    assert draft == ModelDrafter(model).propose(long[-1:], 4, greedy_rule).tokens  # bigram: last token only
    with pytest.raises(ValueError, match="max_length"):
        ModelDrafter(model, max_length=100).propose(long, 4, greedy_rule)


def test_model_drafter_drafts_less_at_the_end_of_a_fixed_context():
    """A model whose caches hold at most 20 positions (like Whisper's 448-token text context)."""

    class Capped(CountingModel):
        allocations = 0

        def new_cache(self, batch_size: int, max_length: int):
            Capped.allocations += 1
            return super().new_cache(batch_size, min(max_length, 20))

    model = Capped(TableModel(vocab_size=8, order=2, seed=1))
    drafter = ModelDrafter(model)
    assert len(drafter.propose([1] * 10, 4, greedy_rule).tokens) == 4
    assert len(drafter.propose([1] * 18, 4, greedy_rule).tokens) == 3  # feeds 18 + 2 = 20 positions
    assert drafter.propose([1] * 21, 4, greedy_rule).tokens == []
    assert len(drafter.propose([1] * 12, 4, greedy_rule).tokens) == 4
    assert Capped.allocations == 1


def test_model_drafter_sampling_returns_q_and_stops_at_eos():
    model = TableModel(vocab_size=6, order=2, seed=3)
    drafter = ModelDrafter(model, sample=True, generator=torch.Generator().manual_seed(0), eos_token_id=0)
    saw_eos = False
    for _ in range(50):
        draft = drafter.propose([1, 2], 5, sampling_rule)
        assert draft.probs is not None and draft.probs.shape == (len(draft.tokens), 6)
        assert torch.allclose(draft.probs.sum(-1), torch.ones(len(draft.tokens), dtype=draft.probs.dtype))
        assert all(draft.probs[i, t] > 0 for i, t in enumerate(draft.tokens))
        if 0 in draft.tokens:
            saw_eos = True
            assert draft.tokens.index(0) == len(draft.tokens) - 1
        else:
            assert len(draft.tokens) == 5
    assert saw_eos
    one_hot = ModelDrafter(model, sample=True, return_probs=False)
    assert one_hot.propose([1, 2], 3, sampling_rule).probs is None


def test_model_drafter_sampling_refuses_a_greedy_rule():
    model = TableModel(vocab_size=6, order=2, seed=3)
    with pytest.raises(ValueError, match="temperature > 0"):
        ModelDrafter(model, sample=True).propose([1, 2], 3, greedy_rule)
