"""Test and benchmark material for decode-time biasing: an LJ Speech LM with held-out sentences.

The LM corpus is ``<shared>/text/ljspeech_sentences.tsv`` (public-domain English). Every
``holdout_every``-th line is held out: tests and benchmarks evaluate on held-out sentences only, so
the LM never saw the exact text it is asked to help recognise.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Optional

from burble.testing.dev_audio import shared_dir

HOLDOUT_EVERY = 10


def ljspeech_path() -> Path:
    path = shared_dir() / "text" / "ljspeech_sentences.tsv"  # type: ignore[operator]
    if not path.is_file():
        raise FileNotFoundError(f"LJ Speech sentences not found at {path}")
    return path


def ljspeech_lines() -> list[tuple[str, str]]:
    """``(id, text)`` of every LJ Speech line, in file order."""
    lines = []
    with ljspeech_path().open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                key, _, text = line.rstrip("\n").partition("\t")
                lines.append((key, text))
    return lines


def split_holdout(
    lines: list[tuple[str, str]], every: int = HOLDOUT_EVERY
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(train, held_out)``: line ``i`` is held out when ``i % every == 0``."""
    train = [line for i, line in enumerate(lines) if i % every]
    held = [line for i, line in enumerate(lines) if not i % every]
    return train, held


def lm_cache_dir() -> Path:
    root = os.environ.get("BURBLE_CACHE")
    base = Path(root).expanduser() if root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "burble"
    return base / "lm"


def ljspeech_lm(
    order: int = 3,
    *,
    max_lines: Optional[int] = None,
    backend: str = "kaldingram",
    extra_lines: tuple[str, ...] = (),
    suffix: str = ".arpa",
) -> Path:
    """An LM on the training part of LJ Speech (optionally the first ``max_lines`` lines, plus
    ``extra_lines`` of domain text), built once and cached by its parameters."""
    from burble.asr.fusion.lm import build_lm

    train, _ = split_holdout(ljspeech_lines())
    texts = [text for _, text in train[:max_lines]] + list(extra_lines)
    key = hashlib.sha256(repr((order, backend, texts)).encode()).hexdigest()[:16]
    path = lm_cache_dir() / f"ljspeech-{order}gram-{backend}-{key}{suffix}"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + f".{os.getpid()}.tmp{suffix}")
        build_lm(texts, partial, order, backend=backend)
        partial.replace(path)
    return path
