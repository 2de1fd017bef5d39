"""Output-layer logits through an int8 copy of the embedding, exact where the argmax can be.

A tiny.en decoding step reads its whole tied output embedding (51,864 x 384 float32, 80 MB) to
produce logits, and on a 2-core CPU that read alone is ~3 ms of a ~9 ms step. Greedy decoding only
needs the *largest* logit exactly. :func:`screened_logits` therefore multiplies an int8 copy of
the embedding (20 MB, per-row scales, bfloat16 activations: ``torch.ops.aten._weight_int8pack_mm``,
~0.8 ms), bounds each approximation's error, and recomputes in float32 only the entries that the
bound cannot rule out, plus a fixed set of always-exact entries. The result is a full ``(N, V)``
float32 tensor that downstream code reads as usual.

The guarantee (``tests/kernels/test_screened_projection.py`` checks the bound and the argmax):
an entry is exact unless its upper bound lies below the lower bound of the best *free* entry (a
token neither in ``exact`` nor in ``ignored``). So the argmax over any set that holds either all
free tokens or none of them, plus any subset of ``exact``, is the argmax of the float32 product.
Whisper's chain (suppression of a fixed list, the blank rule, the timestamp grammar) only ever masks
such sets, which is why :mod:`burble.asr.search` turns the screen on exactly when no other processor
is in the chain. Entries within ``window`` nats of the overall best are made exact too, so
log-softmax normalisers (the average log-probability of a window, the no-speech probability) differ
from the float32 ones by ~1e-3 nats at most; the approximations left are far down the tail.

The error bound of entry ``r`` for an input row ``x`` (``w_r`` the float32 row, ``q_r s_r`` its
int8 copy, ``u = 2^-8`` bfloat16's unit roundoff)::

    |x . w_r - approx_r| <= u |x| |w_r|                          (x rounded to bfloat16)
                          + min(s_r / 2 |x|_1, |x| |w_r - q_r s_r|)   (the weight rounded to int8)
                          + 2u |approx_r|                         (the bfloat16 output)

times a safety factor of 1.25 for float32 accumulation. Measured on real tiny.en states, actual
errors stay below a quarter of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

BFLOAT16_ROUNDOFF = 2.0**-8
SAFETY = 1.25  # headroom over the analytic bound for float32 accumulation inside the kernel
MAX_EXACT = 4096  # more candidates than this in a pass: one float32 product is cheaper


@dataclass(frozen=True)
class Int8Table:
    """An int8 copy of a ``(V, D)`` float32 weight, with what the error bound needs per row.

    Attributes:
      weight: the float32 weight itself (exact entries are recomputed from it).
      quantized: ``(V, D)`` int8, ``round(weight / scale)``.
      scale_bf16: ``(V,)`` the per-row scales as the int8 kernel takes them.
      half_scale: ``(V,)`` ``scale / 2``, the largest rounding error of a weight.
      residual_norm: ``(V,)`` ``|weight - quantized * scale|`` per row.
      input_rounding: ``(V,)`` ``u |weight_r|``, what rounding ``x`` to bfloat16 can cost per unit of ``|x|``.
    """

    weight: torch.Tensor
    quantized: torch.Tensor
    scale_bf16: torch.Tensor
    half_scale: torch.Tensor
    residual_norm: torch.Tensor
    input_rounding: torch.Tensor

    @classmethod
    def of(cls, weight: torch.Tensor) -> "Int8Table":
        weight = weight.detach().float().contiguous()
        # Rounding the scale to bfloat16 first makes the bound describe the kernel's actual weights.
        scale = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127).bfloat16().float()
        quantized = torch.round(weight / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        residual = weight - quantized.float() * scale[:, None]
        return cls(
            weight=weight,
            quantized=quantized.contiguous(),
            scale_bf16=scale.bfloat16(),
            half_scale=scale / 2,
            residual_norm=residual.norm(dim=1),
            input_rounding=weight.norm(dim=1) * BFLOAT16_ROUNDOFF,
        )


@dataclass(frozen=True)
class ScreenPolicy:
    """Which entries of one decode's logits must be exact.

    Attributes:
      free: ``(V,)`` bool, the tokens a mask removes all together or not at all.
      exact: indices always recomputed in float32 (specials, timestamps, tokens masked one by one).
      exact_weight_t: ``(D, len(exact))`` their float32 weight rows, gathered once.
      window: entries within this many nats of the best one are made exact as well.
    """

    free: torch.Tensor
    exact: torch.Tensor
    exact_weight_t: torch.Tensor
    window: float = 4.0

    @classmethod
    def of(
        cls, table: Int8Table, *, exact: Sequence[int], ignored: Sequence[int], window: float = 4.0
    ) -> "ScreenPolicy":
        """``exact``: tokens that must be exact; ``ignored``: tokens always masked (their values never matter)."""
        free = torch.ones(table.weight.shape[0], dtype=torch.bool)
        exact_index = torch.tensor(sorted(set(exact)), dtype=torch.long)
        free[exact_index] = False
        free[torch.tensor(sorted(set(ignored)), dtype=torch.long)] = False
        exact_weight_t = table.weight.index_select(0, exact_index).T.contiguous()
        return cls(free=free, exact=exact_index, exact_weight_t=exact_weight_t, window=window)


def error_bound(x: torch.Tensor, approx: torch.Tensor, table: Int8Table) -> torch.Tensor:
    """``(N, V)`` upper bounds of ``|x @ weight.T - approx|`` (see the module docstring)."""
    x_bf16 = x.bfloat16().float()
    norm = x.norm(dim=1, keepdim=True)
    weight_term = torch.minimum(
        table.half_scale[None] * x_bf16.abs().sum(dim=1, keepdim=True),
        table.residual_norm[None] * x_bf16.norm(dim=1, keepdim=True),
    )
    bound = torch.addcmul(weight_term, table.input_rounding[None], norm)
    bound.add_(approx.abs(), alpha=2 * BFLOAT16_ROUNDOFF)
    return bound.mul_(SAFETY)


def screened_logits(x: torch.Tensor, table: Int8Table, policy: ScreenPolicy) -> Optional[torch.Tensor]:
    """``x (N, D) float32 -> (N, V) float32``: ``x @ table.weight.T``, exact where it can decide the argmax.

    Returns ``None`` when more than :data:`MAX_EXACT` entries would need recomputing (a flat
    distribution: 14 of 1400 captured tiny.en rows on the dev speech): the caller's full float32 product is cheaper then.

    Args:
      x: the rows to project (CPU, float32).
      table: the int8 copy of the weight (:meth:`Int8Table.of`, built once per model).
      policy: which entries must be exact (:meth:`ScreenPolicy.of`, per decode).
    """
    approx = torch.ops.aten._weight_int8pack_mm(x.bfloat16(), table.quantized, table.scale_bf16).float()
    bound = error_bound(x, approx, table)
    lower, upper = approx - bound, approx + bound
    best_free = lower.masked_fill(~policy.free[None], float("-inf")).amax(dim=1, keepdim=True)
    best = lower.amax(dim=1, keepdim=True)
    candidate = policy.free[None] & ((upper >= best_free) | (upper >= best - policy.window))
    columns = candidate.any(dim=0).nonzero().squeeze(1)
    if len(columns) > MAX_EXACT:
        return None
    approx.index_copy_(1, policy.exact, x @ policy.exact_weight_t)
    approx.index_copy_(1, columns, x @ table.weight.index_select(0, columns).T)
    return approx
