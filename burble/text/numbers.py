"""English number words, the way read speech says digits: ``num2words``, without its "and".

LJ Speech and LibriSpeech transcripts, and the CMU dictionary words the aligner needs, write
numbers as American speakers read them: "one hundred five" (no British "and"), separate words
rather than "ninety-nine", and four-digit years in pairs ("eighteen oh three"). ``num2words``
does the spelling; this module only cuts its output into those words.
"""

from __future__ import annotations

from functools import lru_cache

from num2words import num2words

# num2words reads any integer as a year, but only these are read in pairs in the corpora
# burble is measured on: 1100-1999 ("eighteen eighteen") and 2010-2099 ("twenty ten"); 2000-2009
# are cardinals ("two thousand five") and so is everything else.
_PAIRED_YEARS = (range(1100, 2000), range(2010, 2100))


def _words(spelled: str) -> list[str]:
    """num2words' text -> words: hyphens and commas are word breaks, "and" is dropped."""
    return [w for w in spelled.replace(",", " ").replace("-", " ").split() if w != "and"]


def _check(n: int) -> None:
    if n < 0:
        raise ValueError(f"only non-negative integers are spelled, got {n}")


@lru_cache(maxsize=4096)
def _cached(n: int, to: str) -> tuple[str, ...]:
    return tuple(_words(num2words(n, lang="en", to=to)))


def cardinal_words(n: int) -> list[str]:
    """Cardinal words: 199 -> one hundred ninety nine, 1_000_018 -> one million eighteen."""
    _check(n)
    return list(_cached(n, "cardinal"))


def ordinal_words(n: int) -> list[str]:
    """Ordinal words: 14 -> fourteenth, 22 -> twenty second, 101 -> one hundred first."""
    _check(n)
    return list(_cached(n, "ordinal"))


def year_words(n: int) -> list[str]:
    """A year read in pairs: 1818 -> eighteen eighteen, 1803 -> eighteen oh three, 1900 -> nineteen hundred."""
    _check(n)
    return list(_cached(n, "year"))


def is_paired_year(n: int) -> bool:
    """Whether a four-digit number is read as a year in pairs (see ``_PAIRED_YEARS``)."""
    return any(n in years for years in _PAIRED_YEARS)


def spoken_number(n: int) -> list[str]:
    """How a digit string is usually read: years in pairs (1818 -> eighteen eighteen), else cardinal."""
    return year_words(n) if is_paired_year(n) else cardinal_words(n)
