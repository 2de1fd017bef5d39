"""Linear layers for passes of a few rows on the CPU: oneDNN with a prepacked weight.

A speculative verification pass runs ``1 + k`` positions through every linear layer of a small
decoder. On the CPUs here MKL's sgemm pays a much higher fixed cost for 2-8 rows than its
single-row GEMV (a 256 x 768 layer, 2 threads: 12 us for 1 row, 37-42 us for 4), which ate the
gain of verifying several tokens in one pass. oneDNN with the weight reordered once into its
blocked layout costs ~22 us for 1-8 rows. So :func:`linear` sends multi-row float32 inference on
the CPU to oneDNN (weights packed on first use and cached on the module) and everything else
(one row, training, other dtypes and devices) to ``torch.nn.functional.linear``. Results agree
with ``F.linear`` to float32 rounding (a different summation order), which the tests check.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

MAX_PACKED_ROWS = 64  # prefill-sized inputs go to MKL's GEMM, which is efficient there
_PACKED_ATTR = "_burble_packed_weight"
_available: Optional[bool] = None


def _packing_available() -> bool:
    global _available
    if _available is None:
        try:
            w = torch.zeros(8, 8)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, 4)
            torch.ops.mkldnn._linear_pointwise(torch.zeros(2, 8), packed, None, "none", [], "")
            _available = bool(torch.backends.mkldnn.is_available())
        except (AttributeError, RuntimeError):
            _available = False
    return _available


def _packed(layer: nn.Module) -> torch.Tensor:
    """The layer's weight in oneDNN's layout, packed once per weight version."""
    key = (layer.weight.data_ptr(), layer.weight._version)
    cached = getattr(layer, _PACKED_ATTR, None)
    if cached is None or cached[0] != key:
        cached = (key, torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), 4))
        object.__setattr__(layer, _PACKED_ATTR, cached)  # not a parameter or buffer: never saved
    return cached[1]


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """``layer(x)``; multi-row float32 CPU inference through oneDNN with a prepacked weight."""
    return weight_linear(x, layer, layer.bias)


def weight_linear(x: torch.Tensor, owner: nn.Module, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x @ owner.weight.T (+ bias)`` as :func:`linear` computes it, for any module holding an
    ``(out, in)`` weight: an ``nn.Linear``, or a tied ``nn.Embedding`` used as the output
    projection (Whisper's logits). The packed weight is cached on ``owner``."""
    weight = owner.weight
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if (1 < rows <= MAX_PACKED_ROWS and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and not (torch.is_grad_enabled() and weight.requires_grad)
            and _packing_available()):
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), _packed(owner), bias, "none", [], "")
        return out.reshape(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)
