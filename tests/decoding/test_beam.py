"""Beam search: exhaustive on a tiny model, with additive scorers joining after the softmax."""

from __future__ import annotations

import itertools
import math

import torch

from burble.decoding.beam import beam_search, length_normalised_score
from burble.decoding.options import DecodingOptions
from burble.testing.toy_models import TableModel

V = 3  # token 0 ends a sequence; 1 and 2 are words
EOS = 0
MAX_NEW = 3


class PrefixBonus:
    """A shallow-fusion-like scorer: a fixed pseudo-random bonus per (prefix, next token)."""

    adds_score = True

    def __init__(self, prompt_len: int, scale: float = 2.0) -> None:
        self.prompt_len = prompt_len
        self.scale = scale

    def bonus(self, prefix: tuple[int, ...], token: int) -> float:
        gen = torch.Generator().manual_seed(hash((prefix, token)) % (2**31))
        return float(torch.randn((), generator=gen, dtype=torch.float64)) * self.scale

    def score(self, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
        rows = [tuple(row[self.prompt_len :]) for row in tokens.tolist()]
        return torch.tensor([[self.bonus(row, t) for t in range(vocab_size)] for row in rows], dtype=torch.float64)

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        logits.add_(self.score(tokens, logits.shape[-1]).to(logits.dtype))


class EditsLogits(PrefixBonus):
    """The same bonus presented as a plain logits edit (what beam search used to do with it)."""

    adds_score = False


def _best_by_enumeration(model: TableModel, prompt: torch.Tensor, scorer: PrefixBonus | None, length_offset: int = 0) -> list[int]:
    """The finished sequence with the best length-normalised fused score, by brute force."""
    best, best_score = None, -math.inf
    for length in range(MAX_NEW):
        for words in itertools.product([1, 2], repeat=length):
            tokens = list(words) + [EOS]
            total = 0.0
            for i, token in enumerate(tokens):
                context = torch.cat([prompt, torch.tensor([tokens[:i]], dtype=torch.long)], dim=1)
                logits = model.forward(context, model.new_cache(1, context.shape[1]))[0, -1]
                total += float(torch.log_softmax(logits, -1)[token])
                if scorer is not None:
                    total += scorer.bonus(tuple(tokens[:i]), token)
            score = length_normalised_score(total, length_offset + len(words), None)
            if score > best_score:
                best, best_score = list(words), score
    return best


def _beam(model: TableModel, prompt: torch.Tensor, processors, length_offset: int = 0) -> list[int]:
    # 9 beams cover every live prefix of 3 steps over 2 words, so the search is exhaustive.
    options = DecodingOptions(max_new_tokens=MAX_NEW, eos_token_id=EOS, beam_size=9, length_offset=length_offset)
    return beam_search(model, prompt, options, processors=processors).tokens[0]


def test_exhaustive_beam_equals_enumeration_without_scorers():
    for seed in range(5):
        model = TableModel(V, order=3, seed=seed, scale=1.5)
        prompt = torch.tensor([[1, 2]])
        assert _beam(model, prompt, []) == _best_by_enumeration(model, prompt, None)


def test_additive_scorer_joins_after_log_softmax():
    differs = 0
    for seed in range(8):
        model = TableModel(V, order=3, seed=seed, scale=1.5)
        prompt = torch.tensor([[1, 2]])
        scorer = PrefixBonus(prompt.shape[1])
        expected = _best_by_enumeration(model, prompt, scorer)
        assert _beam(model, prompt, [scorer]) == expected
        differs += _beam(model, prompt, [EditsLogits(prompt.shape[1])]) != expected
    # The check has teeth: adding the same bonuses to the logits (renormalised) picks other outputs.
    assert differs > 0


def test_length_offset_counts_a_forced_prefix_in_the_ranking():
    """With ``length_offset`` (a stream's committed words at the prompt's end) finished hypotheses
    rank by score / (offset + new tokens), as enumeration says; the offset changes some choices
    (a short ending with a large bonus no longer wins on its few tokens alone)."""
    differs = 0
    for seed in range(8):
        model = TableModel(V, order=3, seed=seed, scale=1.5)
        prompt = torch.tensor([[1, 2]])
        scorer = PrefixBonus(prompt.shape[1], scale=3.0)
        expected = _best_by_enumeration(model, prompt, scorer, length_offset=6)
        assert _beam(model, prompt, [scorer], length_offset=6) == expected
        differs += expected != _best_by_enumeration(model, prompt, scorer)
    assert differs > 0
