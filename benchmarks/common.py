"""Shared bits of the benchmark scripts: machine description, markdown tables, BENCHMARKS.md."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Sequence

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
