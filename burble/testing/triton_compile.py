"""Compile burble's attention kernels for a real GPU target without having that GPU.

The Triton interpreter checks what the kernels compute but not whether they compile: Triton's
code generator rejects things the interpreter accepts (non-constexpr globals, unsupported dot
shapes), and the tile sizes decide whether a launch fits the GPU's shared memory. Triton compiles
ahead of time from a signature (its bundled ``ptxas`` included, no driver needed), so the tests can
run the full NVIDIA pipeline on a CPU-only machine and read the shared memory each kernel needs.
"""

from __future__ import annotations

from typing import Any

import torch

# Largest dynamic shared memory per block (bytes) by compute capability (CUDA programming guide).
SHARED_MEMORY_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}

_POINTER_DTYPE = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}
_FLOAT_SCALARS = {"qk_scale"}


def compile_kernel(
    kernel: str,
    arch: int,
    dtype: torch.dtype,
    constexprs: dict[str, Any],
    *,
    num_warps: int,
    num_stages: int,
) -> Any:
    """Compile one of the kernels of :mod:`burble.kernels.triton_kernels` for ``sm_<arch>``.

    Args:
      kernel: ``"decode"``, ``"combine"`` or ``"prefill"``.
      arch: compute capability as an integer (``90`` for Hopper).
      dtype: dtype of ``q``/``k``/``v`` and of the output.
      constexprs: values of every ``tl.constexpr`` parameter of the kernel.
      num_warps, num_stages: launch options.

    Returns:
      Triton's compiled kernel; ``.metadata.shared`` is its shared memory in bytes.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from burble.kernels import triton_kernels

    fn = {
        "decode": triton_kernels._split_kv_decode_kernel,
        "combine": triton_kernels._combine_splits_kernel,
        "prefill": triton_kernels._prefill_kernel,
    }[kernel]
    missing = [p.name for p in fn.params if p.is_constexpr and p.name not in constexprs]
    if missing:
        raise ValueError(f"constexpr values missing for {missing}")
    signature: dict[str, str] = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in ("Q", "K", "V", "Out"):
            signature[name] = _POINTER_DTYPE[dtype]
        elif name in ("PartialOut", "PartialLse", "Mask"):
            signature[name] = "*fp32"
        elif name == "Lengths":
            signature[name] = "*i32"
        elif name in _FLOAT_SCALARS:
            signature[name] = "fp32"
        elif name[:1].isupper():
            raise ValueError(f"no pointer type known for kernel argument {name}")
        else:
            signature[name] = "i32"
    source = ASTSource(
        fn=fn,
        signature=signature,
        constexprs={(fn.arg_names.index(name),): value for name, value in constexprs.items()},
    )
    return triton.compile(
        source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "num_stages": num_stages}
    )
