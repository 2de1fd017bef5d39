"""How many torch CPU threads each compute worker gets: the one meaning of ``--threads``.

Every command that computes (``transcribe``, ``stream``, ``listen``, ``serve``) reads ``--threads N``
the same way: ``N`` torch intra-op threads per compute worker, where a compute worker is one of
the things that decode in parallel (``transcribe``: a ``--workers`` process or Ray actor;
``serve``: a compute slot; ``stream`` / ``listen``: the one recognizer). ``0`` means automatic:
the machine's cores divided among those workers, at least 1. Torch-free, so command modules and
the batch engines can both use it without importing a model.
"""

from __future__ import annotations

import os
from typing import Optional


def available_cores() -> int:
    """CPU cores this process may run on (its CPU affinity where the OS has one, else all cores)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def worker_threads(workers: int, threads: int = 0, cores: Optional[int] = None) -> int:
    """Torch threads per compute worker, so that ``workers * threads <= cores``.

    A request above the worker's share of the cores is capped at that share: more threads than
    cores make the workers' OpenMP pools spin against each other, which is slower than the share.

    Args:
      workers: compute workers running in parallel (processes, actors, server compute slots).
      threads: requested threads per worker; 0 shares the cores evenly.
      cores: CPU cores available (default: :func:`available_cores`).
    """
    if cores is None:
        cores = available_cores()
    fair = max(1, cores // max(1, workers))
    return min(threads, fair) if threads > 0 else fair

