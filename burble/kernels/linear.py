"""Linear layers for passes of a few rows on the CPU: the kernel that suits the row count.

A decoding step multiplies one row by every weight of the decoder, and a speculative verification
pass ``1 + k`` rows. Both read the whole weight and do little arithmetic, so the cost is how fast
a kernel streams the weight from memory, and on the CPUs here that depends on the layout:

* **One row** of a layer wider out than in (``out > in``: the MLP's up projection, a fused
  query/key/value) multiplies a contiguous transposed copy of the weight (MKL's GEMV over
  ``(in, out)``): on the 2-core AMD EPYC machine 164 us for tiny.en's 1536 x 384 up projection
  from a cold cache against 340 us for ``F.linear``'s ``(out, in)`` GEMV. With the fused query/key/value
  below, a one-row tiny.en decoder forward took 9.5 ms against 10.1 (medians of 300 interleaved
  passes). Square and narrowing layers keep ``F.linear`` (level, or faster there).
* **2-64 rows**: MKL's sgemm pays a much higher fixed cost for 2-8 rows than its single-row GEMV
  (a 256 x 768 layer, 2 threads: 12 us for 1 row, 37-42 us for 4), which ate the gain of
  verifying several tokens in one pass. oneDNN with the weight reordered once into its blocked
  layout costs ~22 us for 1-8 rows.
* Everything else (prefill-sized inputs, training, other dtypes and devices) is
  ``torch.nn.functional.linear``.

Copies (transposed, packed) are made on first use, cached on the module and remade when its weight
changes. :func:`fused_linear` runs several layers that read the same input (a block's query, key and
value) as one wider layer, whose weight is their concatenation: one pass over the input and one
kernel call instead of three. Results agree with ``F.linear`` to float32 rounding (a different
summation order), which the tests check.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

MAX_PACKED_ROWS = 64  # prefill-sized inputs go to MKL's GEMM, which is efficient there
_PACKED_ATTR = "_burble_packed_weight"
_TRANSPOSED_ATTR = "_burble_transposed_weight"
_FUSED_ATTR = "_burble_fused_layers"
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


def _transposed(layer: nn.Module) -> torch.Tensor:
    """The layer's weight as a contiguous ``(in, out)`` copy, made once per weight version."""
    key = (layer.weight.data_ptr(), layer.weight._version)
    cached = getattr(layer, _TRANSPOSED_ATTR, None)
    if cached is None or cached[0] != key:
        cached = (key, layer.weight.detach().T.contiguous())
        object.__setattr__(layer, _TRANSPOSED_ATTR, cached)
    return cached[1]


def _inference(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """A float32 CPU product that autograd does not track."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and not (torch.is_grad_enabled() and weight.requires_grad))


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """``layer(x)`` through the kernel that suits the rows (see the module docstring)."""
    return weight_linear(x, layer, layer.bias)


def weight_linear(x: torch.Tensor, owner: nn.Module, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x @ owner.weight.T (+ bias)`` as :func:`linear` computes it, for any module holding an
    ``(out, in)`` weight: an ``nn.Linear``, or a tied ``nn.Embedding`` used as the output
    projection (Whisper's logits). The transposed or packed weight is cached on ``owner``."""
    weight = owner.weight
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if rows == 1 and weight.shape[0] > weight.shape[1] and _inference(x, weight):
        flat = x.reshape(1, x.shape[-1])
        out = torch.addmm(bias, flat, _transposed(owner)) if bias is not None else flat @ _transposed(owner)
        return out.reshape(*x.shape[:-1], weight.shape[0])
    if 1 < rows <= MAX_PACKED_ROWS and _inference(x, weight) and _packing_available():
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), _packed(owner), bias, "none", [], "")
        return out.reshape(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)


class _FusedLayers(nn.Module):
    """Layers reading one input as one: their weights stacked ``(sum of outs, in)``, biases
    concatenated (zeros for a layer without one). Not a submodule: never saved."""

    def __init__(self, layers: Sequence[nn.Linear], key: tuple) -> None:
        super().__init__()
        self.key = key  # the parts' (storage, version) it was made from
        self.sizes = [layer.weight.shape[0] for layer in layers]
        # Ordinary tensors even when first called under inference mode: their copies are keyed by
        # version, which inference tensors do not keep.
        with torch.inference_mode(False), torch.no_grad():
            self.weight = torch.cat([layer.weight.detach() for layer in layers])
            biases = [layer.bias.detach() if layer.bias is not None else layer.weight.new_zeros(layer.weight.shape[0])
                      for layer in layers]
            self.bias = torch.cat(biases) if any(layer.bias is not None for layer in layers) else None


def fused_linear(x: torch.Tensor, owner: nn.Module, layers: Sequence[nn.Linear]) -> list[torch.Tensor]:
    """``[linear(x, layer) for layer in layers]`` as one product over their stacked weights, for
    inference on the CPU (cached on ``owner``, remade when a weight changes); layer by layer
    where autograd tracks the weights or off the CPU."""
    if not all(_inference(x, layer.weight) for layer in layers):
        return [linear(x, layer) for layer in layers]
    key = tuple((layer.weight.data_ptr(), layer.weight._version) for layer in layers)
    fused = getattr(owner, _FUSED_ATTR, None)
    if fused is None or fused.key != key:
        fused = _FusedLayers(layers, key)
        object.__setattr__(owner, _FUSED_ATTR, fused)
    return list(weight_linear(x, fused, fused.bias).split(fused.sizes, dim=-1))
