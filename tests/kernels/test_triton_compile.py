"""The kernels compile for real NVIDIA targets (no GPU needed) and fit their shared memory.

The interpreter tests check the arithmetic; this checks what only Triton's code generator sees:
that the kernels are valid Triton for the GPU, and that the tiles :func:`launch_config` picks
fit the smallest shared memory of the supported GPUs.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from burble.kernels.triton_attention import launch_config  # noqa: E402
from burble.testing.triton_compile import SHARED_MEMORY_LIMIT, compile_kernel  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(triton.knobs.runtime.interpret), reason="TRITON_INTERPRET is on in this process"),
]

WORST_CASE_FLAGS = {"IS_CAUSAL": True, "HAS_MASK": True, "HAS_LENGTHS": True}


@pytest.mark.parametrize(
    "arch, dtype, head_dim, kernel",
    [
        (86, torch.float16, 64, "decode"),
        (86, torch.float16, 64, "prefill"),
        (86, torch.float32, 256, "decode"),
        (86, torch.float32, 256, "prefill"),
        (90, torch.bfloat16, 64, "decode"),
        (90, torch.bfloat16, 64, "prefill"),
    ],
)
def test_kernel_compiles_and_fits_shared_memory(arch, dtype, head_dim, kernel):
    config = launch_config(kernel, dtype, head_dim, q_len=9)
    compiled = compile_kernel(
        kernel, arch, dtype,
        {
            **WORST_CASE_FLAGS,
            "PRECISION": "ieee" if dtype == torch.float32 else "tf32",
            "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_D": config.block_d,
        },
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    assert 0 < compiled.metadata.shared <= SHARED_MEMORY_LIMIT[arch], compiled.metadata.shared


def test_combine_kernel_compiles():
    compiled = compile_kernel("combine", 86, torch.float16, {"BLOCK_D": 64, "BLOCK_S": 64}, num_warps=1, num_stages=1)
    assert compiled.asm["ptx"]


def test_missing_constexpr_is_reported():
    with pytest.raises(ValueError, match="BLOCK_S"):
        compile_kernel("combine", 86, torch.float16, {"BLOCK_D": 64}, num_warps=1, num_stages=1)
