"""Accuracy cases for burble's Triton attention kernels, measured against SDPA in float64.

Each :class:`AttentionCase` builds random inputs, runs a kernel and PyTorch's SDPA at the input
precision, and reports both errors against an fp64 SDPA reference whose mask is built here from
first principles (not with :mod:`burble.kernels.attention`'s helpers). Tests then apply
FlashAttention's rule: the kernel's error may be at most about twice PyTorch's own error at the
same precision, plus a small absolute floor.

Without a GPU the kernels run under the Triton interpreter, which must be switched on before
``triton`` is first imported; :func:`run_interpreted` therefore measures the cases in a child
process (``python -m burble.testing.attention_cases NAME ...`` with ``TRITON_INTERPRET=1``), so the
setting never leaks into the process that runs the rest of the test suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

_RESULT_MARKER = "ATTENTION-CASES-JSON:"


@dataclass(frozen=True)
class AttentionCase:
    """One kernel call to check.

    Attributes:
      name: identifier (also the test id).
      batch, heads, q_len, k_len, head_dim: ``q`` is ``(batch, heads, q_len, head_dim)``.
      dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (GPU only).
      causal: bottom-right aligned causal mask.
      mask: ``"none"``; ``"tree"`` (additive ``-inf`` tree mask over the last ``q_len`` keys, the
        speculative verification layout, shape ``(1, 1, Tq, Tk)``); ``"tree_bool"`` (the same as a
        boolean mask); ``"additive"`` (finite random biases ``(B, H, Tq, Tk)``).
      kv_lengths: valid keys per batch row, or ``None`` for all ``k_len``.
      shared_kv: ``k``/``v`` have batch 1 (cross-attention keys shared by every hypothesis).
      cache_capacity: if set, ``k``/``v`` are ``[:, :, :k_len]`` views of a cache this long.
      q_from_projection: ``q`` is a ``(B, T, H, D)`` tensor transposed to ``(B, H, T, D)``, the
        non-contiguous layout a model's head split produces.
      kernel: ``"dispatch"`` (``burble.kernels.attention(..., backend="triton")``), ``"decode"`` or
        ``"prefill"`` (the kernel entry points, with the block overrides below).
      num_splits, block_m, block_n: kernel overrides (small blocks cross block edges on tiny shapes).
      scale_factor: multiplies the softmax scale given to the kernel only; ``!= 1`` makes a
        negative control whose error the tolerance must catch.
      seed: random seed of the inputs.
    """

    name: str
    batch: int = 2
    heads: int = 2
    q_len: int = 1
    k_len: int = 37
    head_dim: int = 64
    dtype: str = "float32"
    causal: bool = False
    mask: str = "none"
    kv_lengths: Optional[tuple[int, ...]] = None
    shared_kv: bool = False
    cache_capacity: Optional[int] = None
    q_from_projection: bool = False
    kernel: str = "dispatch"
    num_splits: Optional[int] = None
    block_m: Optional[int] = None
    block_n: Optional[int] = None
    scale_factor: float = 1.0
    seed: int = 0


# Shapes stay tiny: the interpreter runs every program in Python. Lengths are odd on purpose.
CASES: dict[str, AttentionCase] = {
    c.name: c
    for c in [
        # One decode step against the cache.
        AttentionCase("decode_one_token_fp32", k_len=37),
        AttentionCase("decode_one_token_fp16", k_len=53, dtype="float16", causal=True),
        # Ragged rows: row 1 has 5 keys, so most of its splits are empty; row 2 ends mid-block.
        AttentionCase(
            "decode_ragged_lengths_splits", batch=3, k_len=77, kv_lengths=(77, 5, 41),
            kernel="decode", num_splits=4, block_n=16,
        ),
        # A batch row with no visible key comes out as zeros (as SDPA on CPU gives).
        AttentionCase("decode_empty_row", k_len=19, kv_lengths=(0, 13), kernel="decode", num_splits=2, block_n=16),
        # Reading a view of a preallocated KV cache in place (strides of the full capacity).
        AttentionCase(
            "decode_cache_view_fp16", k_len=50, cache_capacity=128, kv_lengths=(50, 31), dtype="float16",
            kernel="decode", num_splits=3, block_n=16, head_dim=40,
        ),
        # Speculative verification: k + 1 = 5 new tokens against a cache of 24, causal or tree mask.
        AttentionCase(
            "verify_causal_k_plus_1", q_len=5, k_len=29, causal=True, kv_lengths=(29, 29), q_from_projection=True,
        ),
        AttentionCase(
            "verify_tree_mask_fp32", q_len=5, k_len=29, mask="tree", kernel="decode", num_splits=3, block_n=16,
        ),
        AttentionCase("verify_tree_mask_fp16", q_len=7, k_len=30, mask="tree", dtype="float16"),
        AttentionCase("verify_tree_bool_mask", q_len=5, k_len=21, mask="tree_bool", head_dim=32),
        # Prefill: square causal with a head dim that is not a power of two, block edges crossed.
        AttentionCase(
            "prefill_causal_square_odd", batch=1, q_len=45, k_len=45, head_dim=40, causal=True,
            kernel="prefill", block_m=16, block_n=16,
        ),
        # Prompt continuing a cache: causal aligned bottom-right, ragged rows.
        AttentionCase(
            "prefill_causal_bottom_right", q_len=23, k_len=61, causal=True, kv_lengths=(61, 50),
            kernel="prefill", block_m=16, block_n=16,
        ),
        # Cross-attention: no mask, keys of one audio shared by both rows, via the dispatch.
        AttentionCase(
            "prefill_cross_attention_fp16", q_len=19, k_len=33, shared_kv=True, dtype="float16",
            q_from_projection=True,
        ),
        # Arbitrary finite additive biases per (batch, head), plus causal.
        AttentionCase(
            "prefill_additive_mask_causal", q_len=30, k_len=30, mask="additive", causal=True, head_dim=32,
            kernel="prefill", block_m=16, block_n=16,
        ),
        # More queries than keys: the first rows see nothing under a bottom-right causal mask.
        AttentionCase("prefill_more_queries_than_keys", batch=1, q_len=20, k_len=11, causal=True, head_dim=32),
        # Negative controls: a 5 % wrong scale must fail the tolerance (proves the check can fail).
        AttentionCase("control_decode_wrong_scale", k_len=37, scale_factor=1.05),
        AttentionCase("control_prefill_wrong_scale", q_len=20, k_len=20, causal=True, scale_factor=1.05),
    ]
}

CONTROL_CASES = tuple(name for name, case in CASES.items() if case.scale_factor != 1.0)


def tolerance(dtype: str, torch_error: float) -> float:
    """FlashAttention's acceptance rule: twice PyTorch's own error at this precision plus a floor.

    The floor covers the float32 case, where SDPA's error is near one ulp and a different (but
    equally valid) summation order alone exceeds twice that.
    """
    floor = {"float32": 2e-6, "float16": 2e-4, "bfloat16": 2e-3}[dtype]
    return 2.0 * torch_error + floor


def make_inputs(case: AttentionCase, device: str = "cpu") -> dict[str, Optional[torch.Tensor]]:
    """Random ``q``, ``k``, ``v`` in the case's dtype plus its mask and lengths."""
    gen = torch.Generator().manual_seed(case.seed)
    dtype = getattr(torch, case.dtype)
    kv_batch = 1 if case.shared_kv else case.batch
    capacity = case.cache_capacity or case.k_len

    if case.q_from_projection:
        q = torch.randn(case.batch, case.q_len, case.heads, case.head_dim, generator=gen).transpose(1, 2)
    else:
        q = torch.randn(case.batch, case.heads, case.q_len, case.head_dim, generator=gen)
    cache_k = torch.randn(kv_batch, case.heads, capacity, case.head_dim, generator=gen)
    cache_v = torch.randn(kv_batch, case.heads, capacity, case.head_dim, generator=gen)
    q, cache_k, cache_v = (t.to(device=device, dtype=dtype) for t in (q, cache_k, cache_v))
    k, v = cache_k[:, :, : case.k_len], cache_v[:, :, : case.k_len]

    mask: Optional[torch.Tensor] = None
    if case.mask in ("tree", "tree_bool"):
        keep = _tree_keep(case.q_len, case.k_len)[None, None]
        mask = keep if case.mask == "tree_bool" else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    elif case.mask == "additive":
        mask = torch.randn(case.batch, case.heads, case.q_len, case.k_len, generator=gen)
    elif case.mask != "none":
        raise ValueError(f"unknown mask kind {case.mask!r}")
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    lengths = None if case.kv_lengths is None else torch.tensor(case.kv_lengths, dtype=torch.int64)
    return {
        "q": q,
        "k": k,
        "v": v,
        "mask": None if mask is None else mask.to(device),
        "kv_lengths": None if lengths is None else lengths.to(device),
    }


def _tree_keep(q_len: int, k_len: int) -> torch.Tensor:
    """A draft tree over the last ``q_len`` keys: node ``i``'s parent is ``(i - 1) // 2`` (a binary
    tree), every node sees the whole prefix, itself and its ancestors, and nothing else."""
    prefix = k_len - q_len
    keep = torch.zeros(q_len, k_len, dtype=torch.bool)
    keep[:, :prefix] = True
    for node in range(q_len):
        walk = node
        while True:
            keep[node, prefix + walk] = True
            if walk == 0:
                break
            walk = (walk - 1) // 2
    return keep


def dense_bias(case: AttentionCase, inputs: dict[str, Optional[torch.Tensor]], dtype: torch.dtype) -> torch.Tensor:
    """The full ``(B, H, Tq, Tk)`` additive mask the case means (``-inf`` = not visible)."""
    b, h, tq, tk = case.batch, case.heads, case.q_len, case.k_len
    keep = torch.ones(b, h, tq, tk, dtype=torch.bool)
    bias = torch.zeros(b, h, tq, tk, dtype=dtype)
    if case.causal:
        # Query i is sequence position (tk - tq) + i and sees keys at or before it.
        query_pos = torch.arange(tq)[:, None] + (tk - tq)
        keep &= torch.arange(tk)[None, :] <= query_pos
    if case.kv_lengths is not None:
        for row, length in enumerate(case.kv_lengths):
            keep[row, :, :, length:] = False
    mask = inputs["mask"]
    if mask is not None:
        mask = mask.cpu().expand(b, h, tq, tk)
        if mask.dtype == torch.bool:
            keep &= mask
        else:
            bias = bias + mask.to(dtype)
    return bias.masked_fill(~keep, float("-inf"))


def measure(case: AttentionCase, device: str = "cpu") -> dict[str, object]:
    """Run the case and return the max abs errors of the kernel and of SDPA against fp64 SDPA."""
    from burble.kernels import triton_attention
    from burble.kernels.attention import attention

    inputs = make_inputs(case, device)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    assert q is not None and k is not None and v is not None
    scale = case.head_dim**-0.5
    full_k, full_v = k.expand(case.batch, -1, -1, -1), v.expand(case.batch, -1, -1, -1)

    reference = F.scaled_dot_product_attention(
        q.cpu().double(), full_k.cpu().double(), full_v.cpu().double(),
        attn_mask=dense_bias(case, inputs, torch.float64), scale=scale,
    )
    same_precision = F.scaled_dot_product_attention(
        q, full_k, full_v, attn_mask=dense_bias(case, inputs, q.dtype).to(device), scale=scale
    )
    # Some CUDA SDPA backends return NaN for a row that sees no key, where the CPU (and the
    # reference, and burble's kernels) give 0; only the rows SDPA computes say what its error is.
    same_precision = torch.nan_to_num(same_precision, nan=0.0)

    kwargs = dict(
        mask=inputs["mask"], is_causal=case.causal, kv_lengths=inputs["kv_lengths"],
        scale=scale * case.scale_factor,
    )
    if case.kernel == "dispatch":
        out = attention(q, k, v, backend="triton", **kwargs)
    elif case.kernel == "decode":
        out = triton_attention.decode_attention(
            q, k, v, num_splits=case.num_splits, block_n=case.block_n, **kwargs
        )
    elif case.kernel == "prefill":
        out = triton_attention.prefill_attention(
            q, k, v, block_m=case.block_m, block_n=case.block_n, **kwargs
        )
    else:
        raise ValueError(f"unknown kernel {case.kernel!r}")

    def error(x: torch.Tensor) -> float:
        return (x.cpu().double() - reference).abs().max().item()

    return {
        "kernel_error": error(out),
        "torch_error": error(same_precision),
        "finite": bool(torch.isfinite(out).all()),
        "shape": list(out.shape),
        "dtype": str(out.dtype).removeprefix("torch."),
        "reference_max": reference.abs().max().item(),
    }


def run_interpreted(names: Sequence[str], timeout: float = 600.0) -> dict[str, dict[str, object]]:
    """Measure the named cases under the Triton interpreter, in a fresh child process.

    Returns:
      ``{name: measure(...) result}``, or ``{name: {"error": traceback}}`` for a case that raised.

    Raises:
      RuntimeError: the child process failed as a whole.
    """
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "burble.testing.attention_cases", *names],
        env=env, capture_output=True, text=True, timeout=timeout,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT_MARKER):
            return json.loads(line[len(_RESULT_MARKER):])
    raise RuntimeError(
        f"attention case runner failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )


def _main(names: Sequence[str]) -> int:
    import triton

    if not triton.knobs.runtime.interpret:
        print("set TRITON_INTERPRET=1 before running this module", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    results: dict[str, dict[str, object]] = {}
    for name in names or list(CASES):
        try:
            results[name] = {"case": asdict(CASES[name]), **measure(CASES[name])}
        except Exception:  # reported per case, so one failure does not hide the others
            results[name] = {"error": traceback.format_exc()}
    print(_RESULT_MARKER + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
