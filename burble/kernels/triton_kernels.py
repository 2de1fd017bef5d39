"""Triton kernels behind :mod:`burble.kernels.triton_attention` (import that module, not this one).

Two kernels share one inner step, :func:`_attend_block`, which folds a block of keys into an
online-softmax accumulator (FlashAttention's running max / running sum, in the log2 domain so that
the exponentials are ``exp2``):

* :func:`_split_kv_decode_kernel` + :func:`_combine_splits_kernel`: FlashDecoding. Decoding reads
  the whole KV cache for a handful of query tokens, so one program per (batch, head) would leave
  most of the GPU idle; instead the cache is cut into splits, each program reduces one split to a
  partial output plus its log-sum-exp, and a second small kernel merges the splits.
* :func:`_prefill_kernel`: FlashAttention forward. One program per block of queries walks the keys
  (stopping early at the causal frontier).

Both take arbitrary strides, so KV-cache views (``cache.keys[l][:, :, :length]``), batch-broadcast
cross-attention keys (stride 0) and broadcast masks are read in place without copies.
Accumulation is fp32 whatever the input dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _attend_block(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    mask_base,
    offs_m,
    start_n,
    stop_n,
    q_len,
    k_len,
    head_dim,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    stride_mm,
    stride_mn,
    qk_scale,
    IS_CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Fold keys ``[start_n, start_n + BLOCK_N) ∩ [0, stop_n)`` into ``(acc, l_i, m_i)``."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    n_valid = offs_n < stop_n
    d_valid = offs_d < head_dim

    # K is loaded transposed, (D, N), so the score block is a plain (M, D) @ (D, N) product.
    k = tl.load(
        k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd,
        mask=n_valid[None, :] & d_valid[:, None],
        other=0.0,
    )
    s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
    if HAS_MASK:
        bias = tl.load(
            mask_base + offs_m[:, None] * stride_mm + offs_n[None, :] * stride_mn,
            mask=(offs_m[:, None] < q_len) & n_valid[None, :],
            other=0.0,
        )
        s += bias.to(tl.float32) * LOG2E
    keep = n_valid[None, :]
    if IS_CAUSAL:
        # Bottom-right alignment: query i is position k_len - q_len + i of the sequence.
        keep = keep & (offs_n[None, :] <= offs_m[:, None] + (k_len - q_len))
    s = tl.where(keep, s, float("-inf"))

    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row that has seen only masked keys keeps m = -inf; subtracting 0 instead avoids
    # (-inf) - (-inf) = NaN and leaves its p and alpha at exactly 0.
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)

    v = tl.load(
        v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
        mask=n_valid[:, None] & d_valid[None, :],
        other=0.0,
    )
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def _split_kv_decode_kernel(
    Q,
    K,
    V,
    Mask,
    Lengths,
    PartialOut,
    PartialLse,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    num_heads,
    q_len,
    k_len,
    head_dim,
    num_splits,
    split_len,
    qk_scale,
    IS_CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Program ``(bh, split)``: all ``q_len <= BLOCK_M`` queries of one head against one split.

    Writes the split's normalised output to ``PartialOut[bh, split]`` ``(q_len, BLOCK_D)`` and its
    base-2 log-sum-exp to ``PartialLse[bh, split]`` ``(q_len,)`` (``-inf`` when the split holds no visible key).
    """
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    b = pid_bh // num_heads
    h = pid_bh % num_heads

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_valid = offs_m < q_len
    d_valid = offs_d < head_dim
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
        mask=m_valid[:, None] & d_valid[None, :],
        other=0.0,
    )

    valid_len = k_len
    if HAS_LENGTHS:
        valid_len = tl.minimum(tl.load(Lengths + b), k_len)
    start = split * split_len
    stop = tl.minimum(start + split_len, valid_len)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    mask_base = Mask + b * stride_mb + h * stride_mh
    for start_n in range(start, stop, BLOCK_N):
        acc, l_i, m_i = _attend_block(
            acc, l_i, m_i, q, k_base, v_base, mask_base, offs_m, start_n, stop,
            q_len, k_len, head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_mm, stride_mn,
            qk_scale, IS_CAUSAL, HAS_MASK, PRECISION, BLOCK_N, BLOCK_D,
        )

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
    # Partials are (B * H, num_splits, q_len, BLOCK_D): only real query rows are written, so a
    # single-token decode writes one row per split, not the BLOCK_M rows the dot product needs.
    rows = (pid_bh * num_splits + split) * q_len + offs_m
    tl.store(PartialOut + rows[:, None] * BLOCK_D + offs_d[None, :], out, mask=m_valid[:, None])
    tl.store(PartialLse + rows, lse, mask=m_valid)


@triton.jit
def _combine_splits_kernel(
    PartialOut,
    PartialLse,
    Out,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    num_heads,
    q_len,
    head_dim,
    num_splits,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Program ``(bh, m)``: merge the splits of query ``m`` of one head by their log-sum-exp."""
    pid_bh = tl.program_id(0)
    m = tl.program_id(1)
    b = pid_bh // num_heads
    h = pid_bh % num_heads

    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_valid = offs_s < num_splits
    rows = (pid_bh * num_splits + offs_s) * q_len + m
    lse = tl.load(PartialLse + rows, mask=s_valid, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    # All splits empty (every key masked) gives weights 0 and an output of 0, like SDPA on CPU.
    weights = tl.math.exp2(lse - tl.where(lse_max == float("-inf"), 0.0, lse_max))
    total = tl.sum(weights, 0)
    partial = tl.load(
        PartialOut + rows[:, None] * BLOCK_D + offs_d[None, :],
        mask=s_valid[:, None],
        other=0.0,
    )
    out = tl.sum(partial * weights[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(
        Out + b * stride_ob + h * stride_oh + m * stride_om + offs_d * stride_od,
        out.to(Out.dtype.element_ty),
        mask=offs_d < head_dim,
    )


@triton.jit
def _prefill_kernel(
    Q,
    K,
    V,
    Mask,
    Lengths,
    Out,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    num_heads,
    q_len,
    k_len,
    head_dim,
    qk_scale,
    IS_CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Program ``(m_block, bh)``: queries ``[m_block * BLOCK_M, +BLOCK_M)`` of one head."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // num_heads
    h = pid_bh % num_heads

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_valid = offs_m < q_len
    d_valid = offs_d < head_dim
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
        mask=m_valid[:, None] & d_valid[None, :],
        other=0.0,
    )

    stop = k_len
    if HAS_LENGTHS:
        stop = tl.minimum(tl.load(Lengths + b), k_len)
    if IS_CAUSAL:
        # Keys past the last row's causal frontier are invisible to the whole block: skip them.
        stop = tl.minimum(stop, pid_m * BLOCK_M + BLOCK_M + (k_len - q_len))

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    mask_base = Mask + b * stride_mb + h * stride_mh
    for start_n in range(0, stop, BLOCK_N):
        acc, l_i, m_i = _attend_block(
            acc, l_i, m_i, q, k_base, v_base, mask_base, offs_m, start_n, stop,
            q_len, k_len, head_dim, stride_kn, stride_kd, stride_vn, stride_vd, stride_mm, stride_mn,
            qk_scale, IS_CAUSAL, HAS_MASK, PRECISION, BLOCK_N, BLOCK_D,
        )

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(
        Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
        out.to(Out.dtype.element_ty),
        mask=m_valid[:, None] & d_valid[None, :],
    )
