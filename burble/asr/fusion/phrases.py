"""Boosted phrases and their weights: parsing of ``--hotwords`` items, hotwords files and API input."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

DEFAULT_WEIGHT = 4.0  # per token; chosen on the tuning set (benchmarks/data/biasing_tune.json) with tiny.en


@dataclass(frozen=True)
class Phrase:
    """A phrase to boost and its bonus per matched token (natural-log units)."""

    text: str
    weight: float = DEFAULT_WEIGHT

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("a boosted phrase cannot be empty")


class HotwordsFileError(FileNotFoundError, ValueError):
    """A hotwords file that does not exist (a ``ValueError`` too: commands report bad input as one line)."""


def parse_phrase(spec: str, default_weight: float = DEFAULT_WEIGHT) -> Phrase:
    """``"phrase"`` or ``"phrase<TAB>weight"`` (a file line or a ``--hotwords`` item)."""
    text, _, weight = spec.rstrip("\n").partition("\t")
    if not weight:
        return Phrase(text.strip(), default_weight)
    try:
        return Phrase(text.strip(), float(weight))
    except ValueError:
        raise ValueError(f"bad phrase weight {weight!r} in {spec!r} (expected phrase<TAB>number)") from None


def load_phrases(path: str | Path, default_weight: float = DEFAULT_WEIGHT) -> list[Phrase]:
    """Phrases from a file: one per line, optionally ``phrase<TAB>weight``; blank lines and ``#`` comments skipped."""
    path = Path(path)
    if not path.is_file():
        raise HotwordsFileError(f"hotwords file not found: {path}")
    phrases = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file (expected one phrase per line)") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            phrases.append(parse_phrase(line, default_weight))
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None
    return phrases


def as_phrases(items: Iterable[str | Phrase | tuple[str, float]], default_weight: float = DEFAULT_WEIGHT) -> list[Phrase]:
    """Normalise API input: strings (``"phrase"`` or ``"phrase\\tweight"``), ``(text, weight)`` or :class:`Phrase`."""
    out = []
    for item in items:
        if isinstance(item, Phrase):
            out.append(item)
        elif isinstance(item, tuple):
            out.append(Phrase(item[0], float(item[1])))
        else:
            out.append(parse_phrase(item, default_weight))
    return out
