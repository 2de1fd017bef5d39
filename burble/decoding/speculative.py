"""Lossless speculative decoding: the drafter protocol, verification rules and statistics.

A :class:`Drafter` proposes up to ``k`` next tokens. The generation loop
(:func:`burble.decoding.generate.generate`) runs the target model once over
``[last token] + draft`` (one pass costs about one decode step, because decoding is memory-bound),
then the rules below keep the output distribution exactly the target's:

* greedy (temperature 0): accept the longest draft prefix equal to the target argmax, then emit the
  target's own token at the first mismatch (or a bonus token after a fully accepted draft);
* sampling: accept draft token ``x`` with probability ``min(1, p(x) / q(x))``; on rejection sample
  from ``normalize(max(0, p - q))``; a draft without ``q`` is a one-hot ``q``, so ``x`` is accepted with
  probability ``p(x)`` and the residual is ``p`` with ``x`` zeroed. After a fully accepted draft one
  bonus token is sampled from ``p``.

``p`` and ``q`` are both taken after the logits-processor chain and the temperature/top-k/top-p warpers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import torch

from burble.decoding.logits import sample_from

# Maps next-token logits (V,) after ``prefix`` to what verification uses: the processed logits at
# temperature 0 (drafters take their argmax) or the warped probabilities when sampling. The loop's
# rules (``generate.TargetRuleOf``) also say, as ``plain_temperature``, when they are nothing but
# softmax(logits / T): a sampling drafter may then score only the rows it drafts from.
TargetRule = Callable[[torch.Tensor, Sequence[int]], torch.Tensor]


@dataclass
class Draft:
    """Proposed continuation: ``tokens`` and optional draft distributions ``probs`` ``(len, V)``.

    ``parents`` makes it a tree (:mod:`burble.decoding.tree`): ``tokens[i]`` follows node
    ``parents[i]`` (``-1``: the last verified token); ``None`` is a chain.
    """

    tokens: list[int]
    probs: Optional[torch.Tensor] = None
    parents: Optional[list[int]] = None


class Drafter(Protocol):
    """Anything that guesses the next tokens cheaply."""

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        """Propose at most ``k`` tokens following ``tokens`` (the full sequence, prompt included)."""
        ...


def verify_greedy(draft: Sequence[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Greedy verification.

    Args:
      draft: ``m`` proposed tokens.
      target_logits: ``(m + 1, V)`` processed target logits; row ``j`` scores the token after
        ``draft[:j]``.

    Returns:
      ``(n_accepted, next_token)``: the accepted draft prefix length and the target's own next token.
    """
    best = target_logits.argmax(dim=-1).tolist()
    n = 0
    while n < len(draft) and draft[n] == best[n]:
        n += 1
    return n, best[n]


def verify_sampling(
    draft: Sequence[int],
    draft_probs: Optional[torch.Tensor],
    target_probs: torch.Tensor,
    generator: Optional[torch.Generator] = None,
) -> tuple[int, int]:
    """Speculative-sampling verification (Leviathan et al. 2023; Chen et al. 2023).

    Args:
      draft: ``m`` proposed tokens.
      draft_probs: ``(m, V)`` draft distributions ``q``, or ``None`` for one-hot drafts.
      target_probs: ``(m + 1, V)`` target distributions ``p`` (after processors and warpers).
      generator: random source (seed it for reproducible runs).

    Returns:
      ``(n_accepted, next_token)`` where ``next_token`` is the residual sample at the first
      rejection, or a bonus sample from ``p`` after a fully accepted draft.
    """
    device = target_probs.device
    for j, x in enumerate(draft):
        p = target_probs[j]
        q = None if draft_probs is None else draft_probs[j].to(p.dtype)
        if q is None or float(q[x]) <= 0.0:
            # One-hot rule (also for a token its own q calls impossible: the ratio p/q would be
            # undefined, and verifying x as one-hot stays lossless whatever proposed it).
            q = torch.zeros_like(p)
            q[x] = 1.0
        ratio = min(1.0, float(p[x]) / float(q[x]))
        u = float(torch.rand((), generator=generator, device=device, dtype=torch.float64))
        if u < ratio:
            continue
        residual = torch.clamp(p - q, min=0.0)
        mass = residual.sum()
        if float(mass) <= 0.0:
            # p == q exactly: rejection has probability 0; guard against rounding.
            residual, mass = p, p.sum()
        return j, int(sample_from(residual, generator))
    bonus = int(sample_from(target_probs[len(draft)], generator))
    return len(draft), bonus
