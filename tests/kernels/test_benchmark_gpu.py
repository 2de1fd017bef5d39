"""benchmarks/gpu.py: its dry run passes every section's code path on the CPU and writes nothing;
its token-agreement count tells identical from different tokens."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu.py"


def _load():
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("benchmark_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_dry_run_runs_every_section_and_writes_nothing():
    benchmarks_md = REPO / "BENCHMARKS.md"
    before = benchmarks_md.read_bytes() if benchmarks_md.exists() else None
    # A fresh process: the dry run turns the Triton interpreter on before triton is imported.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for title in ("Decode attention", "Offline, greedy", "Streams per GPU", "Codec and TTS"):
        assert f"### {title}" in out
    assert "failed" not in out, out[-3000:]
    assert "(interpreter)" in out  # the Triton kernels really ran (interpreted), against SDPA
    assert "PyTorch baseline: fp32, SDPA, eager | " in out and "CUDA graphs, --speculative mtp | " in out
    assert "| tiny.en (bfloat16) | 2 |" in out  # two live streams
    assert (benchmarks_md.read_bytes() if benchmarks_md.exists() else None) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script really benchmarks")
def test_without_a_gpu_and_without_dry_run_it_measures_nothing():
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "needs a CUDA GPU" in done.stdout


def test_token_agreement_counts_differences():
    bench = _load()
    assert bench.token_edits([1, 2, 3], [1, 2, 3]) == 0
    assert bench.token_edits([1, 2, 3], [1, 3]) == 1
    assert bench.token_edits([1, 2, 3], [4, 2, 3, 5]) == 2
    assert bench.agreement([[1, 2, 3], [7]], [[1, 2, 3], [7]]) == "2/2 clips (0.00% tokens differ)"
    assert bench.agreement([[1, 2, 3], [8]], [[1, 2, 3], [7]]) == "1/2 clips (25.00% tokens differ)"
