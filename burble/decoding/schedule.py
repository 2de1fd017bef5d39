"""How long a batch's drafts should be: expected accepted tokens per millisecond (AR/SD scheduling).

A draft pays only when it is accepted often enough to cover what verifying it costs. One pass of
a batch of ``B`` rows feeds every row ``1 + K`` tokens (rows are padded to the longest draft), and
on a CPU it costs about ``fixed + per_token * B * (1 + K)`` milliseconds: the weights are read
once per pass (``fixed``), and each fed token adds its share of the attention and of the
52k-token output projection (``per_token``). A row whose drafts are accepted with probability
``a`` per token (accepted until the first miss) yields ``(1 - a**(k+1)) / (1 - a)`` tokens per pass
with a draft of ``k``. :class:`DraftSchedule` picks the ``K`` that maximises the batch's expected
tokens per millisecond: long drafts for one stream (the pass is mostly ``fixed``), short or no
drafts for a large batch (measured in ``benchmarks/batched_decoding.py``: at 16 rows, verifying
4-token drafts cost more than it saved).

It learns both sides as it goes. Costs: the mean time of each pass shape it has run (rows x
width); a shape it has not run is estimated from a cost line fitted to all passes seen (least
squares over recent passes), made a little optimistic so that a promising draft length gets
tried once and measured rather than ruled out by the estimate. Acceptance: each row's within a
decode, from a prior (the acceptance seen across decodes). The drafts stay drafts: what is emitted is exactly what the verifier decides,
so a schedule changes the speed only, never the text.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Sequence


@dataclass
class PassCost:
    """A pass's cost in milliseconds: ``fixed_ms + per_token_ms * tokens fed``."""

    fixed_ms: float = 11.0
    per_token_ms: float = 1.3

    def of(self, tokens: int) -> float:
        return self.fixed_ms + self.per_token_ms * tokens


def expected_tokens(acceptance: float, draft_length: int) -> float:
    """Tokens a pass yields for a row: its accepted draft prefix (geometric) plus the verifier's."""
    if acceptance >= 1.0:
        return draft_length + 1.0
    return (1.0 - acceptance ** (draft_length + 1)) / (1.0 - acceptance)


class DraftSchedule:
    """Chooses each pass's draft length and learns the cost of a pass and the drafts' acceptance.

    Args:
      cost: the starting cost line (tiny.en on the 2-core CPU here; it is re-fitted from passes).
      prior_acceptance: a row's acceptance before it has drafted (then: what rows have shown).
      prior_weight: how many drafted tokens the prior counts as within one decode.
      window: passes kept for the cost fit.
      learn_cost: measure pass shapes and re-fit the cost line (off: keep ``cost``).
      optimism: factor on the estimated cost of a pass shape not run yet (< 1: try it).
    """

    def __init__(
        self,
        *,
        cost: PassCost = PassCost(),
        prior_acceptance: float = 0.6,
        prior_weight: float = 4.0,
        window: int = 256,
        learn_cost: bool = True,
        optimism: float = 0.8,
    ) -> None:
        if not 0.0 <= prior_acceptance <= 1.0 or prior_weight <= 0:
            raise ValueError("prior_acceptance must be in [0, 1] and prior_weight > 0")
        self.cost = cost
        self.prior_acceptance = prior_acceptance
        self.prior_weight = prior_weight
        self.learn_cost = learn_cost
        self.optimism = optimism
        self._shapes: dict[tuple[int, int], float] = {}  # (rows, width) -> mean ms
        self._passes: collections.deque[tuple[int, float]] = collections.deque(maxlen=window)
        self.chosen: collections.Counter[int] = collections.Counter()  # draft length -> passes

    def draft_length(self, acceptance: Sequence[float], room: Sequence[int], max_draft: int) -> int:
        """The draft length ``K`` for the next pass of ``len(acceptance)`` rows.

        Args:
          acceptance: each row's estimated per-token acceptance.
          room: the longest draft each row may take (0: it drafts nothing, e.g. it has finished).
          max_draft: the longest draft to consider.
        """
        rows = len(acceptance)
        best, best_rate = 0, -1.0
        for k in range(max_draft + 1):
            tokens = sum(expected_tokens(a, min(k, r)) for a, r in zip(acceptance, room))
            rate = tokens / self.pass_ms(rows, 1 + k)
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = k, rate
        self.chosen[best] += 1
        return best

    def pass_ms(self, rows: int, width: int) -> float:
        """Expected milliseconds of a pass feeding ``width`` tokens to each of ``rows`` rows."""
        measured = self._shapes.get((rows, width))
        if measured is not None:
            return measured
        return self.cost.of(rows * width) * (self.optimism if self.learn_cost else 1.0)

    def row_acceptance(self, accepted: int, misses: int) -> float:
        """A row's acceptance: its accepted tokens over accepted tokens plus misses (the maximum-
        likelihood estimate of a geometric run), shrunk towards the prior."""
        w = self.prior_weight
        return (accepted + w * self.prior_acceptance) / (accepted + misses + w)

    def observe_decode(self, accepted: int, misses: int) -> None:
        """Fold a finished decode's drafting into the prior (running average, ~20 decodes)."""
        if accepted + misses:
            rate = accepted / (accepted + misses)
            self.prior_acceptance += 0.05 * (rate - self.prior_acceptance)

    def observe_pass(self, rows: int, width: int, seconds: float) -> None:
        """A pass fed ``width`` tokens to each of ``rows`` rows and took ``seconds``."""
        if not self.learn_cost:
            return
        ms = 1000.0 * seconds
        shape = (rows, width)
        self._shapes[shape] = ms if shape not in self._shapes else 0.8 * self._shapes[shape] + 0.2 * ms
        self._passes.append((rows * width, ms))
        if len(self._passes) < 8:
            return
        n = len(self._passes)
        mean_x = sum(x for x, _ in self._passes) / n
        mean_y = sum(y for _, y in self._passes) / n
        var = sum((x - mean_x) ** 2 for x, _ in self._passes)
        if var < 1e-9 * n:  # one pass size only: the slope is unknown, keep it
            self.cost = PassCost(max(0.0, mean_y - self.cost.per_token_ms * mean_x), self.cost.per_token_ms)
            return
        slope = sum((x - mean_x) * (y - mean_y) for x, y in self._passes) / var
        slope = max(slope, 1e-3)  # timing noise must not make tokens free or negative
        self.cost = PassCost(max(0.0, mean_y - slope * mean_x), slope)
