"""Triton attention kernels vs SDPA in float64, under the Triton interpreter (no GPU needed).

The interpreter has to be switched on before ``triton`` is imported, so every case is measured in
one child process (:func:`burble.testing.attention_cases.run_interpreted`); this process, and so
every other test of the session, never sees ``TRITON_INTERPRET``.
"""

from __future__ import annotations

import pytest

from burble.testing.attention_cases import CASES, CONTROL_CASES, run_interpreted, tolerance

CHECKED = [name for name in CASES if name not in CONTROL_CASES]


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict[str, object]]:
    return run_interpreted(list(CASES))


@pytest.mark.parametrize("name", CHECKED)
def test_kernel_matches_sdpa_within_flash_attention_tolerance(interpreted, name):
    case, result = CASES[name], interpreted[name]
    assert "error" not in result, result.get("error")
    assert result["shape"] == [case.batch, case.heads, case.q_len, case.head_dim]
    assert result["dtype"] == case.dtype
    assert result["finite"]
    limit = tolerance(case.dtype, result["torch_error"])
    assert result["kernel_error"] <= limit, (
        f"{name}: kernel error {result['kernel_error']:.3g} > {limit:.3g} "
        f"(SDPA's own error at {case.dtype}: {result['torch_error']:.3g})"
    )


@pytest.mark.parametrize("name", CONTROL_CASES)
def test_tolerance_rejects_a_kernel_run_with_a_wrong_scale(interpreted, name):
    case, result = CASES[name], interpreted[name]
    assert "error" not in result, result.get("error")
    assert result["kernel_error"] > 10 * tolerance(case.dtype, result["torch_error"])

