"""Test and benchmark material for decode-time biasing: an LJ Speech LM with held-out sentences.

The LM corpus is ``<shared>/text/ljspeech_sentences.tsv`` (public-domain English). Every
``holdout_every``-th line is held out: tests and benchmarks evaluate on held-out sentences only, so
the LM never saw the exact text it is asked to help recognise.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
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


# -- the biasing evaluation set ------------------------------------------------------------------

BIASING_SET_PATH = Path(__file__).with_name("data") / "biasing_set.json"


@dataclass(frozen=True)
class BiasingItem:
    """One evaluation sentence.

    Attributes:
      id: LJ Speech line id (all are held-out lines: the LM never saw them).
      text: the sentence (synthesized with Piper for the benchmark).
      keywords: rare names/terms in it (empty for keyword-free control sentences).
    """

    id: str
    text: str
    keywords: tuple[str, ...] = ()


def word_statistics(lines: list[tuple[str, str]]) -> tuple[Counter, Counter]:
    """``(frequency, capitalised_mid_sentence)`` per lower-cased word over ``lines``."""
    frequency: Counter = Counter()
    capitalised: Counter = Counter()
    for _, text in lines:
        words = text.split()
        for i, raw in enumerate(words):
            word = re.sub(r"[^A-Za-z']", "", raw).strip("'")
            if not word:
                continue
            frequency[word.lower()] += 1
            previous = words[i - 1] if i else ""
            if i and word[0].isupper() and not previous.endswith((".", "?", "!", '"', ":")):
                capitalised[word.lower()] += 1
    return frequency, capitalised


def candidate_items(
    *, max_frequency: int = 40, min_words: int = 6, max_words: int = 22, name_share: float = 0.9
) -> tuple[list[BiasingItem], list[BiasingItem]]:
    """Held-out sentences with rare proper names, and keyword-free control sentences.

    A keyword is a capitalised word of at least 4 letters (not sentence-initial) that the training
    part of LJ Speech either never contains (a name the LM cannot know: only boosting can help) or
    contains 1..``max_frequency`` times, capitalised mid-sentence at least ``name_share`` of the
    time (a name, not a common word). Control sentences have no capitalised word after the first
    and only words seen at least 3 times.
    """
    train, held = split_holdout(ljspeech_lines())
    frequency, capitalised = word_statistics(train)
    names, controls = [], []
    for key, text in held:
        words = text.split()
        if not min_words <= len(words) <= max_words or any(c.isdigit() for c in text):
            continue
        cores = [re.sub(r"[^A-Za-z']", "", w).strip("'") for w in words]
        keywords = []
        for i, core in enumerate(cores):
            lower = core.lower()
            previous = words[i - 1] if i else "."
            if not (i and len(core) >= 4 and core.isalpha() and core[0].isupper() and core[1:].islower()):
                continue
            if previous.endswith((".", "?", "!", ":", '"')) or core in keywords:
                continue
            if frequency[lower] == 0 or (
                frequency[lower] <= max_frequency and capitalised[lower] >= name_share * frequency[lower]
            ):
                keywords.append(core)
        if keywords:
            names.append(BiasingItem(key, text, tuple(keywords)))
        elif frequency[cores[0].lower()] >= 20 and all(c.islower() or i == 0 for i, c in enumerate(cores) if c) and all(
            frequency[c.lower()] >= 3 for c in cores if c
        ):
            controls.append(BiasingItem(key, text))
    return names, controls


def save_biasing_set(items: list[BiasingItem], path: Path = BIASING_SET_PATH, **meta) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "items": [{"id": i.id, "text": i.text, "keywords": list(i.keywords)} for i in items]}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def load_biasing_set(path: Path = BIASING_SET_PATH) -> list[BiasingItem]:
    """The fixed biasing evaluation set (built by ``benchmarks/build_biasing_set.py``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [BiasingItem(d["id"], d["text"], tuple(d["keywords"])) for d in data["items"]]


def biasing_phrases(items: list[BiasingItem]) -> list[str]:
    """Every keyword of the set, once, in order: the boosting list of the benchmark."""
    seen: dict[str, None] = {}
    for item in items:
        for keyword in item.keywords:
            seen.setdefault(keyword, None)
    return list(seen)
