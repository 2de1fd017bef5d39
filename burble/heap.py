"""Process-wide memory settings that keep a long-running server's memory flat.

Two settings, both made before the model runs (``burble serve`` calls them first):

* :func:`fix_mmap_threshold`, glibc's allocator (below);
* :func:`cap_primitive_cache`, the caches of compiled oneDNN primitives (its docstring);

and one call, :func:`release_free_memory`, that the server's compute engine makes when it goes
idle (at most once a second).

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
import functools
import os
import sys
from typing import Any, Optional

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
SERVER_MMAP_THRESHOLD = 1 << 20  # bytes
SERVER_PRIMITIVE_CACHE = 64  # primitives (oneDNN's default is 1024)
PRIMITIVE_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")
IDEEP_CACHE_VARIABLES = ("LRU_CACHE_CAPACITY",)  # PyTorch's ideep layer (aten's mkldnn ops)


@functools.lru_cache(maxsize=None)
def _glibc_function(name: str) -> Optional[Any]:
    """``name`` from the C library if it is glibc's (``None`` off Linux, or on musl, which lacks it).

    Looked up once: ``find_library`` runs ``ldconfig`` in a subprocess, and the engine calls
    :func:`release_free_memory` up to once a second.
    """
    if not sys.platform.startswith("linux"):
        return None
    library = ctypes.util.find_library("c")
    if not library:
        return None
    try:
        return getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None


def fix_mmap_threshold(threshold: int = SERVER_MMAP_THRESHOLD) -> bool:
    """Set a fixed mmap threshold (which also turns glibc's dynamic one off); ``True`` if set.

    A ``MALLOC_MMAP_THRESHOLD_`` in the environment is the user's choice and is left alone.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


def release_free_memory() -> bool:
    """Give the allocator's free pages back to the OS (glibc's ``malloc_trim(0)``); ``True`` if any went.

    Blocks below the mmap threshold live in glibc's heaps (one per thread that allocates, up to 8
    per core), and ``free`` returns only a heap's top to the OS: the free holes between live blocks
    stay resident. A decode's sub-MiB temporaries leave many such holes, so a server's RSS
    measured what its heaps had once held, not what its streams hold. ``malloc_trim(0)`` walks
    every heap and releases the whole free pages in them. Measured in one process with 8
    tiny.en streams mid-stream: 115 MiB released of 289 MiB above idle, in 10 ms. Pages
    released are faulted back in when reused, so the engine calls it when it goes idle, at most
    once a second, not after every call.
    """
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))


def cap_primitive_cache(capacity: int = SERVER_PRIMITIVE_CACHE) -> bool:
    """Cap the two caches of compiled oneDNN primitives at ``capacity`` entries; ``True`` if either was set here.

    oneDNN compiles a primitive per operation shape and keeps up to 1024 of them, and PyTorch's
    ideep layer keeps its own LRU cache of them in front (``LRU_CACHE_CAPACITY``, also 1024). A
    streaming decode's shapes change with every call (window, chunk and tail lengths), so both
    filled with primitives of shapes never seen again:

    - oneDNN's: in bfloat16 a matmul primitive holds its own reordered copy of the weights (~0.5
      MB each for tiny.en); one tiny.en stream fed 240 s grew ~190 MiB more than one fed 30 s.
      With 64 entries the same run grew 26 MiB, at the same speed (float32 never grew).
    - ideep's: in float32 too. Eight pipelines with VAD on a 2-worker engine (30 s each, one
      process) left 93 MiB more in malloc's in-use bytes after they closed than one pipeline had,
      and 28 MiB more after a second round; with 64 entries 27 and 1 MiB; with
      ``torch.backends.mkldnn`` off, 7 and 2 MiB (so it is these caches, not the streams). The
      encoder's convolutions, whose input length changes with every chunk, are one source: 400
      lengths of tiny.en's second convolution leave ~10 MiB behind, ~2 MiB with 8 entries.

    Both read their variable once, when torch first runs a oneDNN primitive: call this before any
    model work. A setting in the environment is the user's choice and is left alone.
    """
    capped = False
    for names in (PRIMITIVE_CACHE_VARIABLES, IDEEP_CACHE_VARIABLES):
        if not any(name in os.environ for name in names):
            os.environ[names[0]] = str(capacity)
            capped = True
    return capped
