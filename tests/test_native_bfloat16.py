"""``burble.precision.native_bfloat16``: bfloat16 counts as native only where the CPU has the instructions."""

import pytest
import torch

import burble.precision as precision


@pytest.mark.parametrize(("flags", "expected"), [
    (frozenset({"avx512f", "avx512_core", "avx512_bf16"}), True),
    (frozenset({"avx512f", "amx_bf16", "amx_tile"}), True),
    # AVX-512 without BF16: oneDNN emulates bfloat16, which measured slower than float32
    (frozenset({"avx512f", "avx512bw", "avx512vl"}), False),
    (None, True),  # no /proc/cpuinfo: oneDNN's own check decides
])
def test_native_bfloat16_needs_the_cpus_bf16_flag(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert precision.native_bfloat16(torch.device("cpu")) is expected
    assert precision.native_bfloat16(torch.device("cuda")) is False


def test_without_onednn_bfloat16_nothing_is_native(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert precision.native_bfloat16(torch.device("cpu")) is False


def test_cpu_flags_reads_this_machine():
    flags = precision.cpu_flags()
    assert flags is None or (isinstance(flags, frozenset) and all(isinstance(f, str) for f in flags))
