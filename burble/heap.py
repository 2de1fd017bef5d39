"""A fixed mmap threshold for glibc's allocator, so a long-running server's memory stays flat.

glibc serves an allocation above its mmap threshold with its own ``mmap``, returned to the OS
when freed. The threshold is dynamic by default: each time such a block is freed it rises to
that block's size (up to 32 MiB), and from then on blocks of that size come from the heap,
where freed holes rarely go back to the OS. A streaming decode allocates temporaries of 1-30 MB
(the padding tail's attention scores, encoder activations) whose sizes change with every call;
with many streams interleaved on the compute workers the heap fragments and the server's RSS
grows with each added stream. Measured on `benchmarks/server_load.py` (tiny.en, float32, 20 s
per client, 2 cores): RSS at 1 / 4 / 8 clients 1335 / 1533 / 2020 MiB with the dynamic
threshold, 1255 / 1346 / 1612 MiB with a fixed 1 MiB threshold, at ~3-7% more CPU (fresh pages
for each large temporary). Torch-free; a no-op off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
SERVER_MMAP_THRESHOLD = 1 << 20  # bytes


def fix_mmap_threshold(threshold: int = SERVER_MMAP_THRESHOLD) -> bool:
    """Set a fixed mmap threshold (which also turns glibc's dynamic one off); ``True`` if set.

    A ``MALLOC_MMAP_THRESHOLD_`` in the environment is the user's choice and is left alone.
    """
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
