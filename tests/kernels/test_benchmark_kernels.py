"""benchmarks/kernels.py without a GPU: it says so, exits 0 and writes no figures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script really benchmarks")
def test_without_cuda_it_reports_and_writes_nothing(tmp_path, capsys):
    output = tmp_path / "BENCHMARKS.md"
    assert _load().main(["--output", str(output)]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out
    assert not output.exists()


def test_shapes_cover_whisper_and_a_half_billion_lm():
    bench = _load()
    shapes = bench.decode_shapes(quick=False)
    heads = {(s.model, s.heads) for s in shapes}
    assert {("whisper-tiny", 6), ("whisper-base", 8), ("lm-0.5b", 14)} <= heads
    assert max(s.cache_len for s in shapes if s.model == "lm-0.5b") == 4096
    assert any(s.kind == "verify" and s.q_len > 1 for s in shapes)
    # KV bytes: keys and values, fp16, the cache slice actually read.
    one = bench.DecodeShape("m", "self", batch=2, heads=3, cache_len=10, capacity=64)
    assert one.kv_bytes == 2 * 2 * 3 * 10 * 64 * 2
    # Causal prefill counts visible (query, key) pairs only: 4 queries after 2 cached keys see 3..6.
    causal = bench.PrefillShape("m", 1, 1, q_len=4, k_len=6, causal=True, head_dim=1)
    assert causal.flops == 4 * (3 + 4 + 5 + 6)


def test_markdown_table():
    table = _load().markdown_table([{"a": "1", "b": "2"}, {"a": "3", "b": "4"}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
