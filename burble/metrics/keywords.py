"""Keyword (phrase) recall and precision, counted per phrase occurrence.

Reference and hypothesis are normalised the same way (case folded, accents folded, punctuation
and hyphens turned into word breaks, inner apostrophes kept), and every keyword - possibly several
words - is counted as a non-overlapping run of normalised words. Per utterance and keyword:

* ``reference`` occurrences, ``hypothesis`` occurrences, and ``hits = min(reference, hypothesis)``;
* recall = hits / reference occurrences, precision = hits / hypothesis occurrences (summed over
  utterances and keywords), so a keyword recognised twice where it was said once costs precision,
  and one said twice but recognised once costs recall.

This is the order-free occurrence count used in contextual-biasing evaluations; it does not check
that the hit lies at the aligned position (WER covers the rest of the transcript).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

Normalizer = Callable[[str], list[str]]


def keyword_words(text: str) -> list[str]:
    """Default normalisation: lower case, accents folded, punctuation/hyphens as breaks."""
    text = unicodedata.normalize("NFKD", text.replace("\u2019", "'"))
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    words = []
    for word in re.split(r"[^\w']+|_", text):
        word = word.strip("'")
        if word:
            words.append(word)
    return words


def count_occurrences(words: Sequence[str], phrase: Sequence[str]) -> int:
    """Non-overlapping occurrences of ``phrase`` (a word sequence) in ``words``."""
    if not phrase:
        raise ValueError("a keyword must contain at least one word")
    count = i = 0
    n = len(phrase)
    while i + n <= len(words):
        if list(words[i : i + n]) == list(phrase):
            count += 1
            i += n
        else:
            i += 1
    return count


@dataclass
class KeywordCounts:
    """Occurrence counts of one keyword (or of all of them)."""

    reference: int = 0
    hypothesis: int = 0
    hits: int = 0

    @property
    def recall(self) -> float:
        return self.hits / self.reference if self.reference else float("nan")

    @property
    def precision(self) -> float:
        return self.hits / self.hypothesis if self.hypothesis else float("nan")

    @property
    def f1(self) -> float:
        total = self.reference + self.hypothesis
        return 2 * self.hits / total if total else float("nan")

    def add(self, other: "KeywordCounts") -> None:
        self.reference += other.reference
        self.hypothesis += other.hypothesis
        self.hits += other.hits


@dataclass
class KeywordReport:
    """Totals and per-keyword counts over a set of utterances."""

    total: KeywordCounts = field(default_factory=KeywordCounts)
    per_keyword: dict[str, KeywordCounts] = field(default_factory=dict)

    @property
    def recall(self) -> float:
        return self.total.recall

    @property
    def precision(self) -> float:
        return self.total.precision


def keyword_counts(
    reference: str, hypothesis: str, keywords: Iterable[str], *, normalize: Normalizer = keyword_words
) -> dict[str, KeywordCounts]:
    """Per-keyword occurrence counts for one utterance."""
    ref_words, hyp_words = normalize(reference), normalize(hypothesis)
    counts = {}
    for keyword in keywords:
        phrase = normalize(keyword)
        r, h = count_occurrences(ref_words, phrase), count_occurrences(hyp_words, phrase)
        counts[keyword] = KeywordCounts(r, h, min(r, h))
    return counts


def keyword_report(
    references: Sequence[str],
    hypotheses: Sequence[str],
    keywords: Iterable[str] | Sequence[Iterable[str]],
    *,
    normalize: Normalizer = keyword_words,
    per_utterance_keywords: Optional[bool] = None,
) -> KeywordReport:
    """Keyword recall/precision over utterances.

    Args:
      references: reference transcripts.
      hypotheses: recognised transcripts (same order).
      keywords: one keyword list for all utterances, or (``per_utterance_keywords``) one list per
        utterance (e.g. the names each test sentence was built around).
      normalize: text -> words, applied to references, hypotheses and keywords alike.
      per_utterance_keywords: force the interpretation of ``keywords`` (default: a list of lists
        with one entry per utterance is per utterance).
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    keywords = list(keywords)
    if per_utterance_keywords is None:
        per_utterance_keywords = len(keywords) == len(references) and all(
            not isinstance(k, str) for k in keywords
        )
    report = KeywordReport()
    for i, (ref, hyp) in enumerate(zip(references, hypotheses)):
        utterance_keywords = keywords[i] if per_utterance_keywords else keywords
        for keyword, counts in keyword_counts(ref, hyp, utterance_keywords, normalize=normalize).items():
            report.per_keyword.setdefault(keyword, KeywordCounts()).add(counts)
            report.total.add(counts)
    return report
