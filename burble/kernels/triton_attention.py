"""burble's fused Triton attention: FlashDecoding for decode steps, FlashAttention for prefill.

:func:`burble.kernels.attention.attention` routes CUDA tensors here when :func:`supports` says
yes; anything else falls back to PyTorch's SDPA. The semantics are exactly those of the dispatch
op: ``q`` ``(B, H, Tq, D)``, ``k``/``v`` ``(B or 1, H, Tk, D)``, an optional boolean or additive mask
broadcastable to ``(B, H, Tq, Tk)``, a causal mask aligned bottom-right (query ``i`` sees keys up to
``Tk - Tq + i``), optional per-row ``kv_lengths``; rows that can see no key come out as zeros.

Two kernels (in :mod:`burble.kernels.triton_kernels`):

* :func:`decode_attention` (used when ``Tq <= DECODE_MAX_QUERIES``: one decode step, or the
  ``k + 1`` tokens of a speculative verification) splits the KV cache into chunks processed in
  parallel and merges them by log-sum-exp, so even batch 1 with 6 heads keeps the GPU busy while
  it streams the cache, which is what bounds decode speed.
* :func:`prefill_attention` (longer query blocks: encoder self-attention, decoder prompts).

The kernels also run on CPU tensors under the Triton interpreter (``TRITON_INTERPRET=1`` set before
``triton`` is first imported), which is how the test suite checks them without a GPU.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import torch

try:
    import triton

    from burble.kernels import triton_kernels as _kernels

    _IMPORT_ERROR: Optional[str] = None
    INTERPRETER: bool = bool(triton.knobs.runtime.interpret)
except ImportError as error:  # no triton (CPU-only wheels, macOS): everything falls back to SDPA
    triton = None  # type: ignore[assignment]
    _kernels = None  # type: ignore[assignment]
    _IMPORT_ERROR = f"triton is not importable ({error})"
    INTERPRETER = False

DECODE_MAX_QUERIES = 16
"""Calls with at most this many queries use the split-KV decode kernel, longer ones the prefill one."""

MAX_HEAD_DIM = 256
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class UnsupportedCall(ValueError):
    """A kernel entry point was given a call it cannot run; ``reason`` is :func:`unsupported_reason`'s."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"Triton attention cannot run this call: {reason}")
        self.reason = reason


def unsupported_reason(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> Optional[str]:
    """Why the Triton kernels cannot run this call, or ``None`` if they can.

    Only metadata is inspected (no device synchronisation), so this is cheap to ask on every call.
    """
    if _IMPORT_ERROR is not None:
        return _IMPORT_ERROR
    if not (q.is_cuda or (INTERPRETER and q.device.type == "cpu")):
        return f"tensors on {q.device} (the kernels need CUDA, or the Triton interpreter for CPU)"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "q, k and v must be 4-D (B, H, T, D)"
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, mask)):
        return "the kernels have no backward pass (inputs require grad)"
    if not (q.device == k.device == v.device):
        return "q, k and v are on different devices"
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes {q.dtype}/{k.dtype}/{v.dtype} (need one of fp16, bf16, fp32 for all three)"
    if INTERPRETER and q.dtype == torch.bfloat16:
        return "the Triton interpreter has no bfloat16"
    if q.is_cuda and torch.cuda.get_device_capability(q.device)[0] < 8:
        # The launch configurations are sized for Ampere and newer (shared memory, bf16 MMA).
        return "the kernels need compute capability 8.0 or newer"
    batch, heads, q_len, head_dim = q.shape
    if k.shape != v.shape:
        return f"k {tuple(k.shape)} and v {tuple(v.shape)} differ (distinct value widths are not supported)"
    if k.shape[0] not in (1, batch) or k.shape[1] != heads or k.shape[3] != head_dim:
        return f"k/v {tuple(k.shape)} do not match q {tuple(q.shape)} (grouped heads are not supported)"
    if q_len == 0 or k.shape[2] == 0 or batch == 0 or heads == 0:
        return "empty tensors"
    if head_dim > MAX_HEAD_DIM:
        return f"head dim {head_dim} > {MAX_HEAD_DIM}"
    if mask is not None:
        if mask.device != q.device:
            return "mask is on a different device"
        if mask.dtype != torch.bool and not mask.is_floating_point():
            return f"mask dtype {mask.dtype} (need bool or floating point)"
        full = (batch, heads, q_len, k.shape[2])
        try:
            if mask.dim() > 4 or torch.broadcast_shapes(mask.shape, full) != full:
                return f"mask {tuple(mask.shape)} does not broadcast to {full}"
        except RuntimeError:
            return f"mask {tuple(mask.shape)} does not broadcast to {full}"
    return None


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None) -> bool:
    """True when :func:`attention` can run this call (else the dispatch falls back to SDPA)."""
    return unsupported_reason(q, k, v, mask) is None


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: Optional[torch.Tensor] = None,
    is_causal: bool = False,
    kv_lengths: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
) -> torch.Tensor:
    """Fused attention with the semantics of :func:`burble.kernels.attention.attention`.

    Picks :func:`decode_attention` for up to :data:`DECODE_MAX_QUERIES` queries, else
    :func:`prefill_attention`.

    Raises:
      UnsupportedCall: the call is not supported (see :func:`unsupported_reason`).
    """
    run = decode_attention if q.shape[-2] <= DECODE_MAX_QUERIES else prefill_attention
    return run(q, k, v, mask=mask, is_causal=is_causal, kv_lengths=kv_lengths, scale=scale)


class LaunchConfig(NamedTuple):
    """Tile sizes and scheduling of one kernel launch."""

    block_m: int
    block_n: int
    block_d: int
    num_warps: int
    num_stages: int


def launch_config(kernel: str, dtype: torch.dtype, head_dim: int, q_len: int = 1) -> LaunchConfig:
    """The default tiles of ``"decode"`` (split-KV) or ``"prefill"`` for this dtype and head dim.

    Sized so that shared memory stays under 99 KiB, the per-block limit of sm_86/sm_89 (the
    smallest of the supported GPUs); fp32 tiles are twice as large, so they pipeline less.
    ``tests/kernels/test_triton_compile.py`` compiles these configurations for real GPU targets
    and checks that bound.
    """
    block_d = max(16, triton.next_power_of_2(head_dim))
    if dtype == torch.float32:
        stages = 2 if block_d <= 128 else 1
    else:
        stages = 3
    if kernel == "decode":
        block_m = max(16, triton.next_power_of_2(q_len))
        return LaunchConfig(block_m, 64 if block_d <= 128 else 32, block_d, num_warps=4, num_stages=stages)
    if kernel == "prefill":
        block = 64 if block_d <= 64 else 32
        return LaunchConfig(block, block, block_d, num_warps=4, num_stages=stages)
    raise ValueError(f"unknown kernel {kernel!r} (expected 'decode' or 'prefill')")


class _Launch(NamedTuple):
    """Kernel arguments shared by both kernels, after broadcasting and validation."""

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    mask_strides: tuple[int, int, int, int]
    lengths: torch.Tensor
    qk_scale: float
    precision: str


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    kv_lengths: Optional[torch.Tensor],
    scale: Optional[float],
) -> _Launch:
    reason = unsupported_reason(q, k, v, mask)
    if reason is not None:
        raise UnsupportedCall(reason)
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    # A batch-1 k/v (cross-attention keys of one audio shared by every hypothesis) is read with
    # stride 0 instead of being copied per row.
    k = k.expand(batch, -1, -1, -1)
    v = v.expand(batch, -1, -1, -1)

    if mask is None:
        mask_arg, mask_strides = q, (0, 0, 0, 0)  # never read: HAS_MASK is False
    else:
        if mask.dtype == torch.bool:
            # Only the mask's own (usually small, broadcast) shape is materialised.
            mask = torch.zeros(mask.shape, dtype=torch.float32, device=q.device).masked_fill(~mask, float("-inf"))
        mask_arg = mask.expand(batch, heads, q_len, k_len)
        mask_strides = tuple(mask_arg.stride())  # type: ignore[assignment]

    if kv_lengths is None:
        lengths = q  # never read: HAS_LENGTHS is False
    else:
        if kv_lengths.shape != (batch,):
            raise ValueError(f"kv_lengths must have shape ({batch},), got {tuple(kv_lengths.shape)}")
        lengths = kv_lengths.to(device=q.device, dtype=torch.int32).contiguous()

    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    return _Launch(
        k=k,
        v=v,
        mask=mask_arg,
        mask_strides=mask_strides,
        lengths=lengths,
        qk_scale=scale * 1.4426950408889634,  # the kernels exponentiate with exp2
        # fp32 inputs get true fp32 products (SDPA's precision), not TF32.
        precision="ieee" if q.dtype == torch.float32 else "tf32",
    )


@functools.lru_cache(maxsize=None)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _choose_splits(rows: int, k_len: int, block_n: int, device: torch.device) -> int:
    """Enough (batch, head, split) programs to fill the GPU about twice over.

    A split may be a single key block: the merge reads one ``D``-vector and one scalar per split
    and query, next to the ``2 * block_n * D`` cache values the split itself reads, so even short
    Whisper caches (224 keys, 6 heads, batch 1) are spread over several SMs.
    """
    units = 4 if device.type != "cuda" else _multiprocessors(device.index or 0)
    wanted = triton.cdiv(2 * units, rows)
    return max(1, min(wanted, triton.cdiv(k_len, block_n), 128))


def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: Optional[torch.Tensor] = None,
    is_causal: bool = False,
    kv_lengths: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    num_splits: Optional[int] = None,
    block_n: Optional[int] = None,
) -> torch.Tensor:
    """Split-KV (FlashDecoding) attention for a few queries against a long key/value cache.

    Args:
      q: ``(B, H, Tq, D)`` with ``Tq <= 64`` (all queries of a head share one program).
      k: ``(B or 1, H, Tk, D)``; any strides (a view of a preallocated KV cache is fine).
      v: like ``k``.
      mask: optional boolean (True = attend) or additive mask broadcastable to ``(B, H, Tq, Tk)``.
      is_causal: bottom-right aligned causal mask.
      kv_lengths: optional ``(B,)`` integer count of valid keys per row.
      scale: softmax scale, default ``1/sqrt(D)``.
      num_splits: number of key chunks reduced in parallel (default: chosen from the GPU size).
      block_n: keys per inner step (default from :func:`launch_config`; tests use 16 to cross
        block edges on tiny shapes).

    Returns:
      ``(B, H, Tq, D)`` in the dtype of ``q``.
    """
    args = _prepare(q, k, v, mask, kv_lengths, scale)
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    if q_len > 64:
        raise ValueError(f"decode_attention takes at most 64 queries, got {q_len}; use prefill_attention")
    config = launch_config("decode", q.dtype, head_dim, q_len)
    block_n = block_n or config.block_n
    rows = batch * heads
    splits = num_splits or _choose_splits(rows, k_len, block_n, q.device)
    if splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {splits}")
    # Every split but the last covers a whole number of key blocks.
    split_len = triton.cdiv(triton.cdiv(k_len, splits), block_n) * block_n
    splits = triton.cdiv(k_len, split_len)

    partial_out = torch.empty((rows, splits, q_len, config.block_d), dtype=torch.float32, device=q.device)
    partial_lse = torch.empty((rows, splits, q_len), dtype=torch.float32, device=q.device)
    _kernels._split_kv_decode_kernel[(rows, splits)](
        q, args.k, args.v, args.mask, args.lengths, partial_out, partial_lse,
        *q.stride(), *args.k.stride(), *args.v.stride(), *args.mask_strides,
        heads, q_len, k_len, head_dim, splits, split_len, args.qk_scale,
        IS_CAUSAL=is_causal, HAS_MASK=mask is not None, HAS_LENGTHS=kv_lengths is not None,
        PRECISION=args.precision, BLOCK_M=config.block_m, BLOCK_N=block_n, BLOCK_D=config.block_d,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    _kernels._combine_splits_kernel[(rows, q_len)](
        partial_out, partial_lse, out, *out.stride(), heads, q_len, head_dim, splits,
        BLOCK_D=config.block_d, BLOCK_S=triton.next_power_of_2(splits),
        num_warps=1 if config.block_d <= 64 else 2,
    )
    return out


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: Optional[torch.Tensor] = None,
    is_causal: bool = False,
    kv_lengths: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    block_m: Optional[int] = None,
    block_n: Optional[int] = None,
) -> torch.Tensor:
    """FlashAttention-style attention for many queries (prompts, encoders, tree verification).

    Args:
      q: ``(B, H, Tq, D)``.
      k: ``(B or 1, H, Tk, D)``; any strides.
      v: like ``k``.
      mask: optional boolean (True = attend) or additive mask broadcastable to ``(B, H, Tq, Tk)``.
      is_causal: bottom-right aligned causal mask (blocks past the frontier are skipped).
      kv_lengths: optional ``(B,)`` integer count of valid keys per row.
      scale: softmax scale, default ``1/sqrt(D)``.
      block_m: queries per program (default from :func:`launch_config`).
      block_n: keys per inner step (default from :func:`launch_config`).

    Returns:
      ``(B, H, Tq, D)`` in the dtype of ``q``.
    """
    args = _prepare(q, k, v, mask, kv_lengths, scale)
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    config = launch_config("prefill", q.dtype, head_dim)
    block_m = block_m or config.block_m
    block_n = block_n or config.block_n
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    _kernels._prefill_kernel[(triton.cdiv(q_len, block_m), batch * heads)](
        q, args.k, args.v, args.mask, args.lengths, out,
        *q.stride(), *args.k.stride(), *args.v.stride(), *args.mask_strides, *out.stride(),
        heads, q_len, k_len, head_dim, args.qk_scale,
        IS_CAUSAL=is_causal, HAS_MASK=mask is not None, HAS_LENGTHS=kv_lengths is not None,
        PRECISION=args.precision, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=config.block_d,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out
