"""Every plausible token sequence of a phrase: surface forms (case, leading space) x BPE splits.

Whisper writes a rare name the way its decoder happens to spell it, token by token, and that path
is often not the tokenizer's canonical BPE encoding of the phrase: ``" Ku" "bern" "etes"`` instead
of ``" Ku" "ber" "net" "es"``, ``"Siobhan"`` after a quote without the leading space, ``" dun"`` in
lower case. A phrase automaton that only holds the canonical encoding never starts on those paths.
:func:`phrase_tokenizations` lists, per phrase, the canonical encoding of each surface form plus
the other segmentations of the same bytes into vocabulary pieces, fewest tokens first, bounded
(``max_splits`` per form, at most ``extra_tokens`` more tokens than the canonical encoding), so
the automaton stays small and a bonus cannot be inflated by spelling a phrase in many tiny pieces.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Iterator

from burble.asr.tokenizer import WhisperTokenizer

# Pieces longer than this are never part of an alternative split (the longest English-only
# vocabulary piece is 128 bytes of repeated punctuation; names use far shorter ones).
_MAX_PIECE_CHARS = 24

# Splits enumerated per surface form before ranking (bounds the time on long phrases).
_MAX_CANDIDATES = 4096

_VOCABULARIES: "weakref.WeakKeyDictionary[WhisperTokenizer, dict[str, dict[str, int]]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class TokenizationOptions:
    """Which token sequences of a phrase the automaton holds.

    Attributes:
      case_variants: also the Capitalized, Title Case and lower-case forms of the phrase.
      max_splits: token sequences per surface form, the canonical encoding included (1: canonical
        only, as before issue 19).
      extra_tokens: an alternative split has at most this many tokens more than the canonical
        encoding (each token earns the per-token weight, so longer splits would earn more).
    """

    case_variants: bool = True
    max_splits: int = 8
    extra_tokens: int = 1

    def __post_init__(self) -> None:
        if self.max_splits < 1:
            raise ValueError("max_splits must be >= 1 (1: the canonical encoding only)")
        if self.extra_tokens < 0:
            raise ValueError("extra_tokens must be >= 0")


def surface_forms(text: str, case_variants: bool = True) -> list[str]:
    """The strings a phrase may appear as in Whisper output (leading space and case variants)."""
    text = " ".join(text.split())
    cases = [text]
    if case_variants:
        title = " ".join(word[:1].upper() + word[1:] for word in text.split(" "))
        cases += [text[:1].upper() + text[1:], text.lower(), title]
    forms: list[str] = []
    for case in cases:
        for form in (" " + case, case):
            if form not in forms:
                forms.append(form)
    return forms


def piece_vocabulary(tokenizer: WhisperTokenizer) -> dict[str, int]:
    """Byte-level piece -> token id over the text vocabulary (built once per tokenizer)."""
    cached = _VOCABULARIES.setdefault(tokenizer, {})
    if "pieces" not in cached:
        cached["pieces"] = {
            piece: token
            for token in range(tokenizer.eot)
            if (piece := tokenizer.piece(token)) and len(piece) <= _MAX_PIECE_CHARS
        }
    return cached["pieces"]


def splits(tokenizer: WhisperTokenizer, form: str, *, max_splits: int, extra_tokens: int) -> list[list[int]]:
    """Token sequences spelling ``form``: its canonical encoding first, then other segmentations of
    its bytes into vocabulary pieces, fewest tokens first (ties: the more
    common pieces first).

    Args:
      tokenizer: the model's tokenizer.
      form: one surface form (e.g. ``" Kubernetes"``).
      max_splits: sequences to return at most, the canonical one included.
      extra_tokens: tokens allowed beyond the canonical encoding's count.
    """
    canonical = tokenizer.encode(form)
    if max_splits <= 1 or not canonical:
        return [canonical]
    text = "".join(tokenizer.piece(token) for token in canonical)  # the form's byte-level string
    vocab = piece_vocabulary(tokenizer)
    n = len(text)
    # pieces[i]: (end, token) of every vocabulary piece starting at i, longest first.
    pieces = [
        [(j, vocab[text[i:j]]) for j in range(min(n, i + _MAX_PIECE_CHARS), i, -1) if text[i:j] in vocab]
        for i in range(n)
    ]
    # fewest[i]: fewest tokens that spell text[i:] (a bound that prunes the search).
    fewest = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        fewest[i] = min((1 + fewest[j] for j, _ in pieces[i]), default=n + 1)
    budget = len(canonical) + extra_tokens
    found: list[list[int]] = [canonical]

    def search(start: int, prefix: list[int], length: int) -> Iterator[list[int]]:
        if start == n:
            yield list(prefix)
            return
        for end, token in pieces[start]:
            if len(prefix) + 1 + fewest[end] <= length:
                prefix.append(token)
                yield from search(end, prefix, length)
                prefix.pop()

    # Every split within the budget (capped: a long phrase of short pieces has very many), ranked
    # by token count, then by how common its pieces are: BPE ids follow merge order, so a low id
    # is a frequent piece, the kind a decoder falls back on when it is unsure of a spelling.
    candidates: list[list[int]] = []
    for sequence in search(0, [], budget):
        candidates.append(sequence)
        if len(candidates) >= _MAX_CANDIDATES:
            break
    candidates.sort(key=lambda seq: (len(seq), sum(math.log(token + 2) for token in seq)))
    for sequence in candidates:
        if sequence not in found:
            found.append(sequence)
            if len(found) >= max_splits:
                break
    return found


def phrase_tokenizations(tokenizer: WhisperTokenizer, text: str, options: TokenizationOptions) -> list[list[int]]:
    """Every token sequence of one phrase under ``options`` (surface forms x splits, no duplicates)."""
    return [tokens for tokens, _, _ in tokenization_table(tokenizer, text, options)]


def tokenization_table(
    tokenizer: WhisperTokenizer, text: str, options: TokenizationOptions
) -> list[tuple[list[int], bool, int]]:
    """``(tokens, canonical, canonical length)`` of every token sequence of one phrase: the
    canonical encoding of each surface form (``canonical`` true) and the form's alternative
    splits, each with the token count of its form's canonical encoding."""
    out: list[tuple[list[int], bool, int]] = []
    seen: set[tuple[int, ...]] = set()
    for form in surface_forms(text, options.case_variants):
        found = splits(tokenizer, form, max_splits=options.max_splits, extra_tokens=options.extra_tokens)
        for n, sequence in enumerate(found):
            if sequence and tuple(sequence) not in seen:
                seen.add(tuple(sequence))
                out.append((sequence, n == 0, len(found[0])))
    return out
