"""Shared bits of the benchmark scripts: machine description, markdown tables, BENCHMARKS.md."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"


def machine_description() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return (
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"Python {platform.python_version()}, load average {load:.1f} at start"
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])


def append_section(title: str, body: str, *, machine: str, write: bool = True) -> None:
    """Print a section and append it to BENCHMARKS.md with the command, date and machine."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"## {title}\n\n`{command_line()}` — {stamp}\n\nMachine: {machine}\n\n{body.strip()}\n"
    print(text)
    if write:
        if not BENCHMARKS_MD.exists():
            BENCHMARKS_MD.write_text("# Benchmarks\n\nEach section is appended by the script named in it.\n\n")
        with open(BENCHMARKS_MD, "a", encoding="utf-8") as out:
            out.write("\n" + text)


def add_baseline_options(parser: argparse.ArgumentParser) -> None:
    """``--baseline-ref`` and the hidden worker options that :func:`measure_in_tree` passes."""
    parser.add_argument(
        "--baseline-ref", metavar="REF",
        help="also measure burble at git REF (a temporary worktree) and print 'before (REF)' and 'after' rows",
    )
    parser.add_argument("--worker-audio", help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)


def write_worker_output(path: str, result: Any) -> None:
    """What a worker run hands back to :func:`measure_in_tree`: its result and where burble came from."""
    import burble

    Path(path).write_text(json.dumps({"burble": burble.__file__, "result": result}))


def measure_in_tree(tree: Path, script: str, argv: Sequence[str], audio: Mapping[str, np.ndarray]) -> Any:
    """Run ``script argv`` as a worker process with burble imported from ``tree``; return its result.

    The worker gets its audio as arrays (``--worker-audio``), so it needs nothing from burble at
    ``tree`` but the model and the recognizer. Both sides of a before/after comparison run this
    way, in fresh processes of the same shape: an in-process "after" beside a subprocess "before"
    measured the process, not the code (peers' thread pools and allocator state in one, not the other).
    """
    with tempfile.TemporaryDirectory(prefix="burble-worker-") as scratch:
        np.savez(Path(scratch) / "audio.npz", **audio)
        output = Path(scratch) / "result.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p))
        command = [sys.executable, script, *argv, "--worker-audio", str(Path(scratch) / "audio.npz"), "--worker-output", str(output)]
        subprocess.run(command, check=True, env=env)
        answer = json.loads(output.read_text())
        if not Path(answer["burble"]).resolve().is_relative_to(Path(tree).resolve()):
            raise RuntimeError(f"the worker imported burble from {answer['burble']}, not from {tree}")
        return answer["result"]


@contextlib.contextmanager
def worktree_at(ref: str) -> Iterator[Path]:
    """A temporary detached ``git worktree`` of ``ref`` under the system temp folder."""
    with tempfile.TemporaryDirectory(prefix="burble-baseline-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False, capture_output=True)


def worker_argv(argv: Sequence[str]) -> list[str]:
    """The command line minus ``--baseline-ref REF`` (a worker measures, it does not recurse)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--baseline-ref":
            skip = True
        elif not arg.startswith("--baseline-ref="):
            out.append(arg)
    return out


def short_ref(ref: str) -> str:
    """``ref`` as given, with its short commit id (the row label of a baseline run)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True).stdout.strip()
    return ref if not commit or commit == ref else f"{ref} = {commit}"
