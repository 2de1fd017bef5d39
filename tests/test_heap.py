"""``burble.heap``: with a fixed mmap threshold a freed large block goes back to the OS; with
glibc's dynamic threshold (the negative control) the same block stays in the process."""

from __future__ import annotations

import os
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


def test_the_primitive_cache_settings_of_the_environment_win(monkeypatch):
    from burble.heap import cap_primitive_cache

    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)  # restored after the test
    assert cap_primitive_cache(8)  # ideep's cache was not set: capped
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512" and os.environ["LRU_CACHE_CAPACITY"] == "8"
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "256")
    assert not cap_primitive_cache(8)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512" and os.environ["LRU_CACHE_CAPACITY"] == "256"


CONVOLUTIONS = """
import sys
from burble.heap import cap_primitive_cache
if sys.argv[1] == "capped":
    assert cap_primitive_cache(8)  # the environment below fixes oneDNN's own cache: this caps ideep's
import torch
def malloc_bytes():  # in-use heap bytes plus mmapped blocks: what the process holds through malloc
    import ctypes
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = Info
    info = mallinfo2()
    return info.uordblks + info.hblkhd
torch.set_num_threads(1)
weight = torch.randn(384, 384, 3)  # Whisper tiny's second encoder convolution
with torch.inference_mode():
    torch.nn.functional.conv1d(torch.randn(1, 384, 7), weight, stride=2, padding=1)
    base = malloc_bytes()
    for frames in range(8, 408):  # a streaming encoder's chunk lengths change with every call
        torch.nn.functional.conv1d(torch.randn(1, 384, frames), weight, stride=2, padding=1)
print((malloc_bytes() - base) / (1 << 20))
"""


def held_after_convolutions(mode: str) -> float:
    env = {"PATH": "/usr/bin:/bin", "MALLOC_MMAP_THRESHOLD_": str(1 << 20), "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"}
    out = subprocess.run([sys.executable, "-c", CONVOLUTIONS, mode], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallinfo2")
def test_a_capped_ideep_cache_stops_float32_convolution_shapes_from_piling_up():
    """With oneDNN's own cache at 64 entries (the server's), PyTorch's ideep cache still kept what
    400 convolution shapes left behind; capped, it does not."""
    held = held_after_convolutions("default")
    if held < 6:
        pytest.skip(f"this CPU's oneDNN convolutions keep little per shape ({held:.1f} MiB over 400 shapes)")
    assert held_after_convolutions("capped") < held - 4


TRIM = """
import sys
from burble.heap import release_free_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
MB = 1 << 20
blocks, pins = [], []
for _ in range(1024):  # 64 MiB in blocks below the mmap threshold, each followed by a live one:
    blocks.append(bytearray(64 << 10))  # a freed block is a hole between live blocks, as a
    pins.append(bytearray(1024))  # decode's temporaries leave them (1 KiB: from malloc, not Python's pools)
base = rss()
del blocks
if sys.argv[1] == "trim":
    assert release_free_memory()
print((base - rss()) / MB)
"""


def released_after_free(mode: str) -> float:
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", TRIM, mode], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_release_free_memory_hands_back_the_holes_that_free_keeps():
    assert released_after_free("free") < 8  # the premise: freed holes below the heap's top stay resident
    assert released_after_free("trim") > 48
