"""Process-wide memory settings that keep a long-running server's memory flat.

Two settings, both made before the model runs (``burble serve`` calls them first):

* :func:`fix_mmap_threshold`, glibc's allocator (below);
* :func:`cap_primitive_cache`, oneDNN's cache of compiled primitives (its docstring).

**glibc's mmap threshold.** glibc serves an allocation above its mmap threshold with its own ``mmap``, returned to the OS
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
SERVER_PRIMITIVE_CACHE = 64  # primitives (oneDNN's default is 1024)
PRIMITIVE_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")


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


def cap_primitive_cache(capacity: int = SERVER_PRIMITIVE_CACHE) -> bool:
    """Cap oneDNN's primitive cache at ``capacity`` entries; ``True`` if set here.

    oneDNN compiles a primitive per operation shape and keeps up to 1024 of them. In bfloat16 a
    matmul primitive holds its own reordered copy of the weights (~0.5 MB each for tiny.en), and a
    streaming decode's shapes change with every call (window and tail lengths), so a bfloat16
    server's memory grew with the audio it had processed: one tiny.en stream fed 240 s grew
    ~190 MiB more than one fed 30 s, most of what ``server_load.py`` had counted as per-stream
    growth. With 64 entries the same run grew 26 MiB, at the same speed (float32 never grew).

    oneDNN reads the variable once, when torch first runs one of its primitives: call this
    before any model work. A setting in the environment is the user's choice and is left alone.
    """
    if any(name in os.environ for name in PRIMITIVE_CACHE_VARIABLES):
        return False
    os.environ[PRIMITIVE_CACHE_VARIABLES[0]] = str(capacity)
    return True
