"""The Triton attention kernels compiled for a real GPU (skipped without CUDA)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from burble.testing.attention_cases import CASES, CONTROL_CASES, AttentionCase, measure, tolerance

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# Shapes of the real workloads: Whisper tiny/base decode and encoder, a 0.5B LM with a long cache.
GPU_CASES = [
    AttentionCase("whisper_decode_beam5", batch=5, heads=6, q_len=1, k_len=448, kv_lengths=(448, 300, 97, 1, 448)),
    AttentionCase("whisper_cross_attention", batch=5, heads=8, q_len=1, k_len=1500, shared_kv=True),
    AttentionCase("whisper_verify_tree", batch=1, heads=6, q_len=9, k_len=201, mask="tree"),
    AttentionCase("whisper_encoder_prefill", batch=2, heads=6, q_len=1500, k_len=1500),
    AttentionCase("lm_decode_long_cache", batch=4, heads=14, q_len=1, k_len=4096, kv_lengths=(4096, 4000, 1234, 17)),
    AttentionCase("lm_prompt_causal", batch=1, heads=14, q_len=300, k_len=812, causal=True),
    AttentionCase("head_dim_128", batch=2, heads=4, q_len=3, k_len=777, head_dim=128, causal=True),
]
ALL = [c for name, c in CASES.items() if name not in CONTROL_CASES] + GPU_CASES


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_kernel_matches_sdpa_on_gpu(case, dtype):
    case = replace(case, dtype=dtype)
    result = measure(case, device="cuda")
    assert result["finite"]
    assert result["dtype"] == dtype
    limit = tolerance(dtype, result["torch_error"])
    assert result["kernel_error"] <= limit, (result["kernel_error"], result["torch_error"])


def test_auto_backend_routes_cuda_calls_to_triton():
    from burble.kernels import triton_attention
    from burble.kernels.attention import attention

    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 6, t, 64, device="cuda", dtype=torch.float16, generator=gen) for t in (1, 300, 300))
    auto = attention(q, k, v, backend="auto")
    fused = triton_attention.attention(q, k, v)
    assert torch.equal(auto, fused)
    torch.testing.assert_close(attention(q, k, v, backend="torch"), fused, rtol=2e-3, atol=2e-3)
