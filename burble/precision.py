"""The compute precisions burble's models run in, by the names the command line uses.

``float32`` is the default everywhere and the reference every other precision is measured
against. ``float16`` and ``bfloat16`` halve weight and KV-cache memory and let a GPU use its
tensor cores; the parts where rounding would change results stay in float32 whatever the model's
dtype: layer norms, the logits every search and logit processor reads, the softmax of word-timing
attention, and the features fed to the encoder (cast only at its input).

Torch-free at import, so ``--help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import torch

DTYPE_NAMES = ("float32", "float16", "bfloat16")
DEFAULT_DTYPE = "float32"

_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def torch_dtype(value: Union[str, "torch.dtype", None]) -> "torch.dtype":
    """The torch dtype of a precision name (``"float16"``, ``"fp16"``...), a torch dtype, or ``None`` (float32).

    Raises:
      ValueError: for anything else, naming the choices.
    """
    import torch

    if value is None:
        return torch.float32
    if isinstance(value, torch.dtype):
        name = str(value).removeprefix("torch.")
    else:
        name = _ALIASES.get(str(value).strip().lower(), str(value).strip().lower())
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {value!r} (choose one of {', '.join(DTYPE_NAMES)})")
    return getattr(torch, name)


def dtype_name(dtype: "torch.dtype") -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


def native_bfloat16(device: "torch.device") -> bool:
    """Whether bfloat16 matmuls and convolutions run natively (fast) on ``device``: a CPU with
    AVX512-BF16 or AMX; on other CPUs bfloat16 is emulated and slower than float32.

    oneDNN's own check (``torch.ops.mkldnn._is_mkldnn_bf16_supported``) is true on any AVX-512
    CPU, native bfloat16 or not: on an AVX-512 Intel machine where it passed, a HiFi-GAN vocoder
    measured RTF 0.80 in bfloat16 against 0.54 in float32 (on this AMD EPYC with AVX512-BF16:
    0.17-0.19 against 0.30-0.39). So where the kernel lists the CPU's flags, they must name a
    native bfloat16 instruction set as well.
    """
    import torch

    if device.type != "cpu" or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    flags = cpu_flags()
    return flags is None or bool(flags & {"avx512_bf16", "amx_bf16"})


def cpu_flags() -> "frozenset[str] | None":
    """The CPU's feature flags from ``/proc/cpuinfo``, or ``None`` where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        return None
    return None
