"""Text normalisation between Whisper's output and an n-gram LM's vocabulary.

Whisper writes cased, punctuated text with digits ("In 1818, Mr. Neild's ..."); an n-gram LM trained
on normalised text knows lower-case words ("in eighteen eighteen mr neild's"). The same
:class:`LMTextNormalizer` is applied to the LM training corpus (:func:`burble.asr.fusion.lm.build_lm`)
and to every word a hypothesis completes during shallow fusion, so both sides agree by construction.

Each step is an explicit option:

* ``lowercase``: fold case.
* ``numbers``: ``"words"`` spells digits out the way LJ Speech's transcripts do (years 1100-1999 and
  2010-2099 as "eighteen eighteen" / "eighteen oh three", other numbers as cardinals "one hundred
  ninety-nine", ordinals "14th" -> "fourteenth"; the words come from :mod:`burble.text.numbers`);
  ``"keep"`` leaves digit strings as words; ``"drop"`` removes them.
* ``hyphens_split``: "ninety-nine" -> "ninety nine" (Whisper and corpora disagree on hyphenation,
  so splitting on both sides is the robust choice).
* ``keep_apostrophes``: keep word-internal apostrophes ("neild's", "don't"); leading and trailing
  ones are always dropped ("debtors'" -> "debtors").
* everything else that is not a letter or digit is punctuation and becomes a word break.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from burble.text.numbers import cardinal_words, ordinal_words, spoken_number

_NUMBER = re.compile(r"(\d+)(st|nd|rd|th)?", re.IGNORECASE)


def number_words(digits: str, suffix: str = "") -> list[str]:
    """Words for a digit string (optionally with an ordinal suffix), LJ Speech style."""
    n = int(digits)
    if suffix:
        return ordinal_words(n)
    if len(digits) > 1 and digits.startswith("0"):
        return [w for d in digits for w in cardinal_words(int(d))]  # "007": digit by digit
    return spoken_number(n)


@dataclass(frozen=True)
class LMTextNormalizer:
    """Maps text (a corpus line or one Whisper word) to a list of LM words.

    Attributes:
      lowercase: fold case.
      numbers: ``"words"`` (spell out, LJ Speech style), ``"keep"`` or ``"drop"``.
      hyphens_split: treat hyphens as word breaks.
      keep_apostrophes: keep apostrophes inside words.
      unicode_fold: NFKD-fold accents ("café" -> "cafe") so curly quotes and accents match the corpus.
    """

    lowercase: bool = True
    numbers: str = "words"
    hyphens_split: bool = True
    keep_apostrophes: bool = True
    unicode_fold: bool = True

    def __post_init__(self) -> None:
        if self.numbers not in ("words", "keep", "drop"):
            raise ValueError(f"numbers must be 'words', 'keep' or 'drop', not {self.numbers!r}")

    def __call__(self, text: str) -> list[str]:
        return list(_normalize(self, text))

    def line(self, text: str) -> str:
        """The normalised text as one space-separated line (for writing an LM corpus)."""
        return " ".join(_normalize(self, text))


@lru_cache(maxsize=65536)
def _normalize(options: LMTextNormalizer, text: str) -> tuple[str, ...]:
    if options.unicode_fold:
        text = text.replace("\u2019", "'").replace("\u2018", "'")
        text = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
    if options.lowercase:
        text = text.lower()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # "1,000" is one number
    words: list[str] = []
    for raw in re.split(r"\s+", text):
        if options.hyphens_split:
            pieces = raw.split("-")
        else:
            pieces = [raw]
        for piece in pieces:
            words.extend(_normalize_token(options, piece))
    return tuple(words)


def _normalize_token(options: LMTextNormalizer, piece: str) -> list[str]:
    """One whitespace/hyphen-free piece -> words: numbers spelled, punctuation removed."""
    out: list[str] = []
    keep = "'" if options.keep_apostrophes else ""
    hyphen = "" if options.hyphens_split else "-"
    # Split letters from digits ("1818," -> "1818"; "14th" stays one number with its suffix).
    position = 0
    for match in _NUMBER.finditer(piece):
        out.extend(_clean_word(piece[position : match.start()], keep + hyphen))
        digits, suffix = match.group(1), match.group(2) or ""
        if options.numbers == "words":
            out.extend(number_words(digits, suffix))
        elif options.numbers == "keep":
            out.append(digits + suffix.lower() if options.lowercase else digits + suffix)
        position = match.end()
    out.extend(_clean_word(piece[position:], keep + hyphen))
    return out


def _clean_word(text: str, allowed: str) -> list[str]:
    """Letters (and the allowed inner marks) only; other characters break words."""
    words = []
    for word in re.split(r"[^\w" + re.escape(allowed) + r"]|_", text) if text else []:
        word = word.strip("'-")
        if word and any(ch.isalpha() for ch in word):
            words.append(word)
    return words
