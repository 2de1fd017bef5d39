"""Word and character error rates with Whisper's English text normaliser on both sides.

Reference transcripts follow their corpora's conventions (upper case, punctuation, numbers
spelled out); recognizers print "Mr." and "$20". Whisper's ``EnglishTextNormalizer`` (the
``whisper-normalizer`` package ports it verbatim: spelling, numbers, contractions, fillers) maps
both to one form before jiwer counts edits. Counts are kept, not rates, so a corpus WER is
``sum(errors) / sum(reference words)`` rather than a mean of per-utterance rates.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple


@functools.lru_cache(maxsize=1)
def _normalizer():
    try:
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError as e:
        raise ImportError("WER needs `pip install whisper-normalizer jiwer`") from e
    return EnglishTextNormalizer()


def normalize_text(text: str) -> str:
    """Whisper's English normalisation (lower case, no punctuation, "mister", "$21", "color")."""
    if not isinstance(text, str):
        raise TypeError(f"expected text, got {type(text).__name__}")
    return " ".join(_normalizer()(text).split())


@dataclass(frozen=True)
class ErrorCounts:
    """Edit counts of a hypothesis against a reference (words or characters).

    Attributes:
      substitutions, deletions, insertions: edit operations of a minimum-edit alignment.
      hits: reference units matched exactly.
      ref_len: units in the reference (= hits + substitutions + deletions).
    """

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    hits: int = 0
    ref_len: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        """errors / reference length (0 when both are empty, inf for errors on an empty reference)."""
        if self.ref_len == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return self.errors / self.ref_len

    def __add__(self, other: "ErrorCounts") -> "ErrorCounts":
        return ErrorCounts(
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
            self.hits + other.hits,
            self.ref_len + other.ref_len,
        )


def _counts(ref_units: List[str], hyp_units: List[str], chars: bool) -> ErrorCounts:
    # jiwer rejects empty references, so the trivial cases are counted here.
    if not ref_units:
        return ErrorCounts(insertions=len(hyp_units))
    if not hyp_units:
        return ErrorCounts(deletions=len(ref_units), ref_len=len(ref_units))
    import jiwer

    if chars:
        out = jiwer.process_characters("".join(ref_units), "".join(hyp_units))
    else:
        out = jiwer.process_words(" ".join(ref_units), " ".join(hyp_units))
    return ErrorCounts(out.substitutions, out.deletions, out.insertions, out.hits, len(ref_units))


def word_errors(reference: str, hypothesis: str, *, normalize: bool = True) -> ErrorCounts:
    """Word edit counts of ``hypothesis`` against ``reference``.

    Args:
      reference: the true transcript.
      hypothesis: the recognizer's output.
      normalize: apply :func:`normalize_text` to both (else split on whitespace as is).
    """
    if normalize:
        reference, hypothesis = normalize_text(reference), normalize_text(hypothesis)
    return _counts(reference.split(), hypothesis.split(), chars=False)


def char_errors(reference: str, hypothesis: str, *, normalize: bool = True) -> ErrorCounts:
    """Character edit counts (spaces between words count as characters, as in jiwer's CER).

    Args:
      reference: the true transcript.
      hypothesis: the recognizer's output.
      normalize: apply :func:`normalize_text` to both first.
    """
    if normalize:
        reference, hypothesis = normalize_text(reference), normalize_text(hypothesis)
    return _counts(list(" ".join(reference.split())), list(" ".join(hypothesis.split())), chars=True)


def wer(reference: str, hypothesis: str, *, normalize: bool = True) -> float:
    """Word error rate of one utterance."""
    return word_errors(reference, hypothesis, normalize=normalize).rate


def cer(reference: str, hypothesis: str, *, normalize: bool = True) -> float:
    """Character error rate of one utterance."""
    return char_errors(reference, hypothesis, normalize=normalize).rate


def corpus_word_errors(pairs: Iterable[Tuple[str, str]], *, normalize: bool = True) -> ErrorCounts:
    """Summed word edit counts over ``(reference, hypothesis)`` pairs."""
    total = ErrorCounts()
    for reference, hypothesis in pairs:
        total = total + word_errors(reference, hypothesis, normalize=normalize)
    return total


def corpus_wer(pairs: Iterable[Tuple[str, str]], *, normalize: bool = True) -> float:
    """Corpus WER: all errors over all reference words (long utterances weigh more)."""
    return corpus_word_errors(pairs, normalize=normalize).rate


def corpus_cer(pairs: Iterable[Tuple[str, str]], *, normalize: bool = True) -> float:
    """Corpus CER: all character errors over all reference characters."""
    total = ErrorCounts()
    for reference, hypothesis in pairs:
        total = total + char_errors(reference, hypothesis, normalize=normalize)
    return total.rate


def align_word_sequences(
    reference: Sequence[str], hypothesis: Sequence[str]
) -> List[Tuple[str, Optional[int], Optional[int]]]:
    """Minimum-edit alignment of two word lists (compared as given; normalise before).

    Returns:
      ``(op, ref_index, hyp_index)`` triples in order; ``op`` is ``"equal"``, ``"substitute"``,
      ``"delete"`` (hyp_index ``None``) or ``"insert"`` (ref_index ``None``).
    """
    for w in list(reference) + list(hypothesis):
        if not w or any(c.isspace() for c in w):
            raise ValueError(f"words must be non-empty without spaces, got {w!r}")
    if not reference or not hypothesis:
        return [("delete", i, None) for i in range(len(reference))] + [
            ("insert", None, j) for j in range(len(hypothesis))
        ]
    import jiwer

    out = jiwer.process_words(" ".join(reference), " ".join(hypothesis))
    triples: List[Tuple[str, Optional[int], Optional[int]]] = []
    for chunk in out.alignments[0]:
        if chunk.type in ("equal", "substitute"):
            for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                triples.append((chunk.type, chunk.ref_start_idx + k, chunk.hyp_start_idx + k))
        elif chunk.type == "delete":
            triples.extend(("delete", i, None) for i in range(chunk.ref_start_idx, chunk.ref_end_idx))
        else:
            triples.extend(("insert", None, j) for j in range(chunk.hyp_start_idx, chunk.hyp_end_idx))
    return triples
