"""The one attention dispatch point of burble.

Every attention call of the models and of the decoding core goes through :func:`attention`.
On CPU (and whenever the Triton path does not support a shape) it runs PyTorch's
``scaled_dot_product_attention``; on CUDA with ``backend="auto"`` or ``"triton"`` it runs burble's
fused Triton kernels (``burble.kernels.triton_attention``) when they are available.

Shapes follow SDPA: ``q`` is ``(B, H, Tq, D)``, ``k`` and ``v`` are ``(B, H, Tk, D)``.
When ``Tq < Tk`` (decoding against a KV cache) the queries are the *last* ``Tq`` positions, so a
causal mask is aligned to the bottom-right corner: query ``i`` sees keys ``0 .. Tk - Tq + i``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Optional, Union

import torch
import torch.nn.functional as F

Backend = Literal["auto", "torch", "triton"]

_DEFAULT_BACKEND: Backend = os.environ.get("BURBLE_ATTENTION_BACKEND", "auto")  # type: ignore[assignment]


def set_default_backend(backend: Backend) -> None:
    """Choose the backend used when a call passes ``backend=None``."""
    global _DEFAULT_BACKEND
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"unknown attention backend {backend!r}")
    _DEFAULT_BACKEND = backend


def get_default_backend() -> Backend:
    return _DEFAULT_BACKEND


def causal_mask(q_len: int, k_len: int, *, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``(q_len, k_len)`` mask, True where attention is allowed, aligned bottom-right.

    The last mask made is kept: every layer of a multi-token decoding pass (speculative
    verification) asks for the same one. Callers must not edit it in place.
    """
    global _last_causal
    key = (q_len, k_len, device)
    last = _last_causal  # one read: another thread may replace it meanwhile
    if last is not None and last[0] == key:
        return last[1]
    offset = k_len - q_len
    rows = torch.arange(q_len, device=device).unsqueeze(1)
    cols = torch.arange(k_len, device=device).unsqueeze(0)
    mask = cols <= rows + offset
    _last_causal = (key, mask)
    return mask


_last_causal: Optional[tuple[tuple, torch.Tensor]] = None


def _torch_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    is_causal: bool,
    kv_lengths: Optional[torch.Tensor],
    scale: Optional[float],
) -> torch.Tensor:
    q_len, k_len = q.shape[-2], k.shape[-2]
    attn_mask = mask
    if is_causal and q_len > 1:
        if q_len == k_len and attn_mask is None and kv_lengths is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        causal = causal_mask(q_len, k_len, device=q.device)
        attn_mask = _combine(attn_mask, causal, q.dtype)
    if kv_lengths is not None:
        keep = torch.arange(k_len, device=q.device)[None, :] < kv_lengths.to(q.device)[:, None]
        attn_mask = _combine(attn_mask, keep[:, None, None, :], q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)


def _combine(mask: Optional[torch.Tensor], keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Merge a boolean keep-mask into an existing bool or additive mask."""
    if mask is None:
        return keep
    if mask.dtype == torch.bool:
        return mask & keep
    return mask.masked_fill(~keep, float("-inf")).to(dtype)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: Optional[torch.Tensor] = None,
    is_causal: bool = False,
    kv_lengths: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    backend: Optional[Backend] = None,
) -> torch.Tensor:
    """Scaled dot-product attention through burble's backend of choice.

    Args:
      q: queries ``(B, H, Tq, D)``.
      k: keys ``(B, H, Tk, D)``.
      v: values ``(B, H, Tk, D)``.
      mask: optional mask broadcastable to ``(B, H, Tq, Tk)``; boolean (True = attend) or additive
        float (e.g. a speculative tree mask with ``-inf`` for non-ancestors).
      is_causal: apply a bottom-right aligned causal mask (query ``i`` sees keys up to
        ``Tk - Tq + i``), which is what decoding against a KV cache needs.
      kv_lengths: optional ``(B,)`` number of valid keys per batch row (the rest are ignored).
      scale: softmax scale, default ``1/sqrt(D)``.
      backend: ``"torch"`` (SDPA), ``"triton"`` (fused kernels: CUDA, or CPU tensors under the
        Triton interpreter) or ``"auto"`` (Triton for supported CUDA calls, else SDPA);
        ``None`` uses the process default (``BURBLE_ATTENTION_BACKEND`` or :func:`set_default_backend`).

    Returns:
      ``(B, H, Tq, D)`` attention output in the dtype of ``q``.
    """
    backend = backend or _DEFAULT_BACKEND
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"unknown attention backend {backend!r} (expected 'auto', 'torch' or 'triton')")
    # "auto" only ever sends CUDA tensors to Triton; an explicit "triton" also runs CPU tensors when
    # the Triton interpreter is on (TRITON_INTERPRET=1), which is how the kernels are tested without
    # a GPU.
    if backend != "torch" and (q.is_cuda or (backend == "triton" and _triton_interpreter_on())):
        from burble.kernels import triton_attention

        # The kernels check the call themselves (``unsupported_reason``), so asking here first would
        # run that check twice on every call; an unsupported call falls back to SDPA instead.
        try:
            return triton_attention.attention(
                q, k, v, mask=mask, is_causal=is_causal, kv_lengths=kv_lengths, scale=scale
            )
        except triton_attention.UnsupportedCall as unsupported:
            if backend == "triton":
                raise ValueError(f"the Triton attention kernels do not support this call: {unsupported.reason}") from None
    elif backend == "triton":
        raise RuntimeError("backend='triton' needs CUDA tensors; use 'auto' or 'torch' on CPU")
    return _torch_attention(q, k, v, mask, is_causal, kv_lengths, scale)


@dataclass(frozen=True)
class KeyValueSegments:
    """Keys and values kept in pieces along the key axis, attended to as one sequence.

    A cache-aware stream's cross-attention source is its final frames (kept by the stream), its
    padding tail's own frames (made per decode) and shared padding frames (one tensor serves every
    stream): joined, they would cost a copy per decode, or every stream the memory of a whole
    tail between its decodes.

    Attributes:
      parts: ``(k, v)`` pairs, each ``(B, H, T_i, D)``, in key order.
    """

    parts: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @property
    def length(self) -> int:
        return sum(k.shape[-2] for k, _ in self.parts)

    def joined(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole keys and values, each ``(B, H, sum T_i, D)`` (a copy)."""
        return torch.cat([k for k, _ in self.parts], dim=-2), torch.cat([v for _, v in self.parts], dim=-2)


# Whole keys and values, or keys and values in segments.
KeysValues = Union[tuple[torch.Tensor, torch.Tensor], KeyValueSegments]


def segmented_attention(
    q: torch.Tensor, source: KeyValueSegments, *, scale: Optional[float] = None, keep_heads: Optional[list[int]] = None
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Attention of ``q`` ``(B, H, Tq, D)`` over all of ``source``'s segments as one unmasked key
    sequence, and the scaled scores ``(B, len(keep_heads), Tq, Tk)`` (float32) of ``keep_heads``.

    One softmax over every segment's scores, then each segment's values weighted by its share of
    it: exact attention without joining the segments. Segments of batch 1 are shared by all rows
    of ``q``. The scores come free here, so word timing's alignment heads cost nothing extra:
    on tiny.en shapes on CPU (1-4 queries, 736-1186 keys in three segments) this took 113-272 us
    where one SDPA call over joined keys plus those heads' scores on the side took 157-344 us.
    It is the math path on every device: decoding asks a few queries at a time, so the scores
    are small.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.cat([q @ k.transpose(-1, -2) for k, _ in source.parts], dim=-1).mul_(scale)
    kept = scores[:, keep_heads].float() if keep_heads else None
    weights = scores.float().softmax(dim=-1).to(q.dtype)
    out: Optional[torch.Tensor] = None
    start = 0
    for k, v in source.parts:
        share = weights[..., start : start + k.shape[-2]] @ v
        out = share if out is None else out.add_(share)
        start += k.shape[-2]
    assert out is not None, "no segments"
    return out, kept


def _triton_interpreter_on() -> bool:
    # Triton reads this variable (with these truthy spellings) to pick interpreter mode.
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")
