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
