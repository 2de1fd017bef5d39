"""Job outputs: where each item's files go, atomic writes, and what counts as "complete" for ``--resume``.

Every output file is written to a hidden temporary file in its final folder, flushed to disk, and
renamed over the final name (``os.replace`` is atomic on POSIX), so a reader never sees a partial
file: a path either does not exist or holds a whole output of some run.

An item is **complete** when every requested format exists and parses as that format
(:func:`check_output`): JSON is an object with ``text`` and ``segments``, SRT is numbered cues with
``-->`` lines, VTT starts with ``WEBVTT``, TXT is UTF-8. The check guards against files that were
not written by burble (copies, hand edits); burble's own writes cannot leave partial files. An
interrupted item (some formats renamed, not all) is incomplete and is decoded again; its
rewrites replace the earlier files whole. Temporary files left by a killed run are removed by
:func:`remove_stale_temporaries` at the start of the next one.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Optional, Sequence

from burble.asr.results import WRITERS, TranscriptionResult

FORMATS: tuple[str, ...] = ("txt", "srt", "vtt", "json")
_TEMP = re.compile(r"^\..+\.tmp-(\d+)$")


def parse_formats(output_format: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"``, one format, or a comma list (``"txt,json"``) as a tuple of formats."""
    names = output_format.split(",") if isinstance(output_format, str) else list(output_format)
    formats: list[str] = []
    for name in (n.strip() for n in names):
        for fmt in FORMATS if name == "all" else (name,):
            if fmt not in FORMATS:
                raise ValueError(f"unknown output format {fmt!r} (choose from {', '.join(FORMATS)} or all)")
            if fmt not in formats:
                formats.append(fmt)
    return tuple(formats)


def output_paths(output_dir: str | Path, item_id: str, formats: Iterable[str]) -> list[Path]:
    """``<output_dir>/<id>.<fmt>`` for each format (``id`` may hold sub-folders)."""
    return [Path(output_dir) / f"{item_id}.{fmt}" for fmt in formats]


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """``write(binary_file)`` into a hidden temporary file next to ``path``, then rename it over
    ``path``: readers and a killed run see the old file or the new one, never half of one."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through ``atomic_write``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_outputs(result: TranscriptionResult, output_dir: str | Path, item_id: str, formats: Sequence[str]) -> list[Path]:
    """Write each format atomically; return the paths in ``formats`` order."""
    paths = output_paths(output_dir, item_id, formats)
    for fmt, path in zip(formats, paths):
        atomic_write_text(path, WRITERS[fmt](result))
    return paths


def check_output(path: Path) -> Optional[str]:
    """``None`` if ``path`` is a whole output of its format, else why not."""
    if not path.is_file():
        return "missing"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return f"unreadable ({error})"
    fmt = path.suffix[1:]
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            return f"invalid JSON ({error.msg})"
        if not isinstance(data, dict) or not isinstance(data.get("segments"), list) or not isinstance(data.get("text"), str):
            return "JSON without 'text' and 'segments'"
    elif fmt == "vtt":
        if not text.startswith("WEBVTT"):
            return "no WEBVTT header"
    elif fmt == "srt":
        blocks = [b for b in text.strip().split("\n\n") if b.strip()]
        for number, block in enumerate(blocks, 1):
            lines = block.split("\n")
            if len(lines) < 2 or lines[0].strip() != str(number) or "-->" not in lines[1]:
                return f"malformed SRT cue {number}"
    return None


def is_complete(output_dir: str | Path, item_id: str, formats: Sequence[str]) -> bool:
    """Whether every requested output of the item exists and is whole (see module docstring)."""
    return all(check_output(path) is None for path in output_paths(output_dir, item_id, formats))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(output_dir: str | Path) -> int:
    """Delete temporary files of writers that are no longer running; return how many."""
    root = Path(output_dir)
    if not root.is_dir():
        return 0
    removed = 0
    for path in root.rglob(".*.tmp-*"):
        match = _TEMP.match(path.name)
        if match and path.is_file() and not _alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed += 1
    return removed
