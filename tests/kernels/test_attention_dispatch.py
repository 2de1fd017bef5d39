"""The dispatch op with ``backend="torch"`` is plain SDPA with burble's mask semantics."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from burble.kernels import attention as attention_module
from burble.kernels import triton_attention
from burble.kernels.attention import (
    KeyValueSegments, attention, causal_mask, get_default_backend, segmented_attention, set_default_backend,
)


def _qkv(batch=2, heads=3, q_len=4, k_len=9, dim=16, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(batch, heads, t, dim, generator=gen, dtype=dtype) for t in (q_len, k_len, k_len)
    )


def test_causal_with_cache_is_aligned_bottom_right():
    q, k, v = _qkv(q_len=4, k_len=9)
    # Query i is position 5 + i: it sees keys 0 .. 5 + i.
    keep = torch.ones(4, 9, dtype=torch.bool).tril(diagonal=5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    out = attention(q, k, v, is_causal=True, backend="torch")
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    # SDPA's own is_causal aligns top-left, which is wrong against a cache: the two must differ.
    top_left = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(4, 9, dtype=torch.bool).tril())
    assert (out - top_left).abs().max() > 1e-3


def test_causal_square_matches_sdpa_is_causal():
    q, k, v = _qkv(q_len=7, k_len=7)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attention(q, k, v, is_causal=True, backend="torch"), expected, rtol=0, atol=1e-12)


def test_causal_mask_helper():
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def test_kv_lengths_equal_attention_over_each_rows_prefix():
    q, k, v = _qkv(batch=3, q_len=2, k_len=11)
    lengths = torch.tensor([11, 4, 7])
    out = attention(q, k, v, kv_lengths=lengths, backend="torch")
    for row, n in enumerate(lengths.tolist()):
        expected = F.scaled_dot_product_attention(q[row : row + 1], k[row : row + 1, :, :n], v[row : row + 1, :, :n])
        torch.testing.assert_close(out[row : row + 1], expected, rtol=0, atol=1e-12)


def test_additive_tree_mask_and_causal_and_lengths_combine():
    q, k, v = _qkv(batch=2, q_len=3, k_len=8)
    # A speculative tree over the last 3 keys: node 2 is a sibling of node 1 (both children of 0).
    tree = torch.zeros(3, 8, dtype=torch.float64)
    tree[2, 6] = float("-inf")
    lengths = torch.tensor([8, 8])
    out = attention(q, k, v, mask=tree, is_causal=True, kv_lengths=lengths, backend="torch")
    keep = torch.ones(3, 8, dtype=torch.bool).tril(diagonal=5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=tree.masked_fill(~keep, float("-inf")))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    # Row 2 really ignores key 6: changing that key's value leaves it unchanged.
    v2 = v.clone()
    v2[:, :, 6] += 10.0
    out2 = attention(q, k, v2, mask=tree, is_causal=True, kv_lengths=lengths, backend="torch")
    torch.testing.assert_close(out2[:, :, 2], out[:, :, 2], rtol=0, atol=1e-12)
    assert (out2[:, :, 1] - out[:, :, 1]).abs().max() > 1e-3


def test_boolean_mask_with_kv_lengths():
    q, k, v = _qkv(batch=2, q_len=2, k_len=6)
    mask = torch.tensor([[True, False, True, True, True, True], [True, True, True, False, True, True]])
    lengths = torch.tensor([6, 3])
    out = attention(q, k, v, mask=mask, kv_lengths=lengths, backend="torch")
    keep = mask[None, None] & (torch.arange(6) < lengths[:, None])[:, None, None, :]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_auto_on_cpu_is_sdpa():
    q, k, v = _qkv(dtype=torch.float32)
    torch.testing.assert_close(attention(q, k, v, backend="auto"), F.scaled_dot_product_attention(q, k, v))


def test_triton_backend_on_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(attention_module, "_triton_interpreter_on", lambda: False)
    q, k, v = _qkv(dtype=torch.float32)
    with pytest.raises(RuntimeError, match="needs CUDA"):
        attention(q, k, v, backend="triton")


def test_unknown_backend_is_rejected():
    q, k, v = _qkv(dtype=torch.float32)
    with pytest.raises(ValueError, match="unknown attention backend"):
        attention(q, k, v, backend="cuda")  # type: ignore[arg-type]
    before = get_default_backend()
    with pytest.raises(ValueError):
        set_default_backend("fast")  # type: ignore[arg-type]
    assert get_default_backend() == before


def test_kernels_refuse_cpu_tensors_outside_the_interpreter():
    q, k, v = _qkv(dtype=torch.float32)
    assert not triton_attention.supports(q, k, v)
    with pytest.raises(ValueError, match="cannot run this call"):
        triton_attention.attention(q, k, v)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda q, k, v, m: (q, k[:, :1], v[:, :1], m), "grouped heads"),
        (lambda q, k, v, m: (q.half(), k, v, m), "dtypes"),
        (lambda q, k, v, m: (q, k, v[..., :8], m), "differ"),
        (lambda q, k, v, m: (q[0], k[0], v[0], m), "4-D"),
        (lambda q, k, v, m: (q, k, v, torch.zeros(5, 9)), "does not broadcast"),
        (lambda q, k, v, m: (q, k, v, torch.zeros(4, 9, dtype=torch.int32)), "mask dtype"),
        (lambda q, k, v, m: (q.bfloat16(), k.bfloat16(), v.bfloat16(), m), "bfloat16"),
        (lambda q, k, v, m: (q.requires_grad_(), k, v, m), "no backward"),
    ],
)
def test_unsupported_calls_fall_back_with_a_reason(monkeypatch, change, reason):
    # Pretend the interpreter is on so that the shape checks (not the device check) answer.
    monkeypatch.setattr(triton_attention, "INTERPRETER", True)
    monkeypatch.setattr(attention_module, "_triton_interpreter_on", lambda: True)
    q, k, v, mask = change(*_qkv(dtype=torch.float32), None)
    found = triton_attention.unsupported_reason(q, k, v, mask)
    assert found is not None and reason in found
    if q.dim() == 4 and q.dtype == k.dtype:
        with pytest.raises(ValueError, match=reason):
            attention(q, k, v, mask=mask, backend="triton")


def test_segmented_attention_is_attention_over_the_joined_keys():
    """Segments (here 3, with batch-1 segments shared by two query rows, one a strided view) give
    SDPA's output over the joined keys, and the kept heads' scores are the scaled scores."""
    q, k, v = _qkv(batch=2, heads=4, q_len=3, k_len=20, dtype=torch.float32)
    k, v = k[:1], v[:1]
    cuts = [(0, 7), (7, 15), (15, 20)]
    parts = tuple((k[:, :, a:b], v[:, :, a:b].contiguous()) for a, b in cuts)
    source = KeyValueSegments(parts)
    assert source.length == 20
    out, scores = segmented_attention(q, source, keep_heads=[1, 3])
    expected = F.scaled_dot_product_attention(q, k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scores, (q[:, [1, 3]] @ k[:, [1, 3]].transpose(-1, -2)) / 4.0)  # D = 16
    joined_k, joined_v = source.joined()
    assert torch.equal(joined_k, k) and torch.equal(joined_v, v)
    # Each segment counts: attention over the first two alone is another answer.
    partial, none = segmented_attention(q, KeyValueSegments(parts[:2]))
    assert none is None and (partial - expected).abs().max() > 1e-3
