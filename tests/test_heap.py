"""``burble.heap``: with a fixed mmap threshold a freed large block goes back to the OS; with
glibc's dynamic threshold (the negative control) the same block stays in the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from burble.heap import fix_mmap_threshold
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
MB = 1 << 20
block = bytearray(8 * MB); del block  # mmapped; its free raises a dynamic threshold to 8 MB
base = rss()
block = bytearray(8 * MB)  # zero-filled: every page is touched
pin = bytearray(64)  # a small block after it pins the heap's top
del block
print((rss() - base) / MB)
"""


def kept_after_free(mode: str) -> float:
    env = {"PATH": "/usr/bin:/bin"}  # no MALLOC_* variables of the caller's
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_fixed_mmap_threshold_returns_freed_blocks_and_the_dynamic_one_does_not():
    assert kept_after_free("dynamic") > 6  # the premise: 8 MB stay resident after the free
    assert kept_after_free("fixed") < 1


PRIMITIVES = """
import sys
from burble.heap import cap_primitive_cache
if sys.argv[1] == "capped":
    assert cap_primitive_cache(8)
import torch
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
torch.set_num_threads(1)
linear = torch.nn.Linear(384, 1536).to(torch.bfloat16)
with torch.inference_mode():
    linear(torch.randn(1, 7, 384, dtype=torch.bfloat16))
    base = rss()
    for rows in range(8, 308):  # a streaming decode's shapes change with every call
        linear(torch.randn(1, rows, 384, dtype=torch.bfloat16))
print((rss() - base) / (1 << 20))
"""


def grown_over_shapes(mode: str) -> float:
    env = {"PATH": "/usr/bin:/bin", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}  # no oneDNN variables of the caller's
    out = subprocess.run([sys.executable, "-c", PRIMITIVES, mode], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_capped_primitive_cache_stops_bfloat16_shapes_from_piling_up():
    grown = grown_over_shapes("default")
    if grown < 100:
        pytest.skip(f"this CPU's bfloat16 matmuls keep no weight copy per shape ({grown:.0f} MiB over 300 shapes)")
    assert grown_over_shapes("capped") < grown - 50


def test_the_primitive_cache_setting_of_the_environment_wins(monkeypatch):
    from burble.heap import cap_primitive_cache

    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")
    assert not cap_primitive_cache(8)
    assert __import__("os").environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512"
