"""Flags that mean the same in every command: ``--device`` (compute) and ``--threads``.

Torch-free (argparse only), so ``--help`` stays fast. How ``--threads`` turns into a thread count
is :func:`burble.cpu_threads.worker_threads`, shared with the batch engines.
"""

from __future__ import annotations

import argparse


def compute_device(value: str) -> str:
    """argparse type of ``--device``: a torch device name; a bare number is refused with a hint,
    because it is what a user who means a microphone types (that flag is ``--input-device``)."""
    if value.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a compute device (cpu, cuda, cuda:1); the microphone is chosen with --input-device"
        )
    return value


def thread_count(value: str) -> int:
    """argparse type of ``--threads``: a whole number >= 0."""
    try:
        threads = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if threads < 0:
        raise argparse.ArgumentTypeError("must be >= 0 (0: automatic)")
    return threads


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device``: where the model computes."""
    parser.add_argument("--device", type=compute_device, default="cpu", help="compute device for the model: cpu, cuda, cuda:1, ...")


def add_threads_argument(parser: argparse.ArgumentParser, workers: str) -> None:
    """``--threads``, with one meaning everywhere (see :mod:`burble.cpu_threads`).

    Args:
      parser: the command's parser.
      workers: what a compute worker is in this command, e.g. ``"each --workers process"``.
    """
    parser.add_argument(
        "--threads", type=thread_count, default=0, metavar="N",
        help=f"torch CPU threads per compute worker ({workers}); 0: automatic, the CPU cores divided "
             "among the workers that compute in parallel (at least 1, and never more than that share)",
    )
