"""Pronunciations (CMU ARPAbet phones) for words the aligner's dictionary lacks.

Forced alignment needs phones for every reference word; a word missing from the CMU dictionary
must be added or the aligner fails (pocketsphinx refuses the text). The guess only has to be
good enough to let the aligner place the word's boundaries, so a small rule-based approach is
used rather than a trained grapheme-to-phoneme model, in this order:

1. the word itself, or without apostrophes (``o'clock`` -> dictionary lookups);
2. numbers spelled out as they are read (``1818`` -> "eighteen eighteen", :mod:`burble.text.numbers`)
   from dictionary words;
3. inflections of a dictionary stem: ``'s``/``s``/``es``, ``ed``/``d``, ``ing``, ``er(s)``,
   ``est``, ``ly``, ``ness``, with the usual voicing rules and doubled consonants
   (``counselled`` -> counsel + D);
4. compounds of dictionary words (``woodcutters`` -> wood + cutters), longest head first;
5. letter-to-sound rules (longest grapheme match), for whatever is left.

Steps 3-4 recurse, so ``bedsteads`` = bed + steads(stead + Z) works.
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional

from burble.text.numbers import spoken_number

Lookup = Callable[[str], Optional[str]]

_VOICELESS = {"P", "T", "K", "F", "TH"}
_SIBILANT = {"S", "Z", "SH", "ZH", "CH", "JH"}

# Grapheme -> phones, tried longest first. Context rules (soft c/g, silent final e, y) are in
# _letters() since they depend on neighbours.
_GRAPHEMES = {
    "tion": "SH AH N", "sion": "ZH AH N", "ture": "CH ER", "ough": "AO", "augh": "AO",
    "tch": "CH", "sch": "S K", "igh": "AY", "eau": "OW", "dge": "JH", "que": "K",
    "ch": "CH", "sh": "SH", "th": "TH", "ph": "F", "wh": "W", "ng": "NG", "ck": "K", "qu": "K W",
    "gh": "G", "kn": "N", "wr": "R", "ee": "IY", "ea": "IY", "oo": "UW", "ou": "AW", "ow": "OW",
    "oa": "OW", "ai": "EY", "ay": "EY", "ei": "EY", "ey": "IY", "ie": "IY", "oi": "OY", "oy": "OY",
    "au": "AO", "aw": "AO", "ew": "UW", "ue": "UW", "ar": "AA R", "er": "ER", "ir": "ER", "ur": "ER",
    "or": "AO R", "x": "K S",
    "a": "AE", "b": "B", "c": "K", "d": "D", "e": "EH", "f": "F", "g": "G", "h": "HH", "i": "IH",
    "j": "JH", "k": "K", "l": "L", "m": "M", "n": "N", "o": "AA", "p": "P", "q": "K", "r": "R",
    "s": "S", "t": "T", "u": "AH", "v": "V", "w": "W", "y": "IH", "z": "Z",
}
_MAX_GRAPHEME = max(len(g) for g in _GRAPHEMES)
_VOWEL_LETTERS = set("aeiouy")


def _letters(word: str) -> List[str]:
    """Letter-to-sound rules: greedy longest grapheme match with a few context rules."""
    phones: List[str] = []
    i, n = 0, len(word)
    while i < n:
        ch = word[i]
        nxt = word[i + 1] if i + 1 < n else ""
        if ch == "e" and i == n - 1 and n > 2 and phones:
            break  # silent final e ("make")
        if ch in "cg" and nxt in ("e", "i", "y"):
            phones.append("S" if ch == "c" else "JH")  # soft c / g
            i += 1
            continue
        if ch == "y" and i == 0:
            phones.append("Y")
            i += 1
            continue
        if ch == "y" and i == n - 1:
            phones.append("IY")
            i += 1
            continue
        if i > 0 and ch == word[i - 1] and ch not in _VOWEL_LETTERS:
            i += 1  # doubled consonant is one sound ("ll", "tt")
            continue
        for size in range(min(_MAX_GRAPHEME, n - i), 0, -1):
            chunk = word[i:i + size]
            if chunk in _GRAPHEMES:
                phones.extend(_GRAPHEMES[chunk].split())
                i += size
                break
        else:
            i += 1  # a character without a sound (apostrophe, stray symbol)
    return phones


def _suffix_phones(stem: List[str], suffix: str) -> List[str]:
    last = stem[-1] if stem else ""
    if suffix in ("s", "es", "'s", "s'", "'"):
        if last in _SIBILANT:
            return stem + ["IH", "Z"]
        return stem + (["S"] if last in _VOICELESS else ["Z"])
    if suffix in ("ed", "d"):
        if last in ("T", "D"):
            return stem + ["IH", "D"]
        return stem + (["T"] if last in _VOICELESS | {"S", "SH", "CH"} else ["D"])
    return stem + {"ing": ["IH", "NG"], "er": ["ER"], "ers": ["ER", "Z"], "est": ["AH", "S", "T"],
                   "ly": ["L", "IY"], "ness": ["N", "AH", "S"]}[suffix]


_SUFFIXES = ("'s", "s'", "'", "ness", "ing", "ers", "est", "es", "ed", "er", "ly", "s", "d")


class PronunciationGuesser:
    """Phones for any word, using a dictionary where it can and rules where it must.

    Args:
      lookup: dictionary lookup returning space-separated ARPAbet phones or ``None``.
    """

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup

    def _dict(self, word: str) -> Optional[List[str]]:
        if not word:
            return None
        phones = self._lookup(word)
        return phones.split() if phones else None

    def _known(self, word: str, depth: int) -> Optional[List[str]]:
        """Dictionary word, inflected dictionary word or compound; ``None`` if none applies."""
        phones = self._dict(word)
        if phones or depth > 3:
            return phones
        for suffix in _SUFFIXES:
            if not word.endswith(suffix) or len(word) - len(suffix) < 2:
                continue
            stem = word[: -len(suffix)]
            # stems as written, with a restored silent e ("conduced"), undoubled ("counselled").
            candidates = [stem, stem + "e"]
            if len(stem) > 2 and stem[-1] == stem[-2]:
                candidates.append(stem[:-1])
            if suffix in ("es", "ed", "er", "est") and stem.endswith("i"):
                candidates.append(stem[:-1] + "y")  # "carried" -> carry
            for cand in candidates:
                base = self._dict(cand)
                if base:
                    return _suffix_phones(base, suffix)
        # compound: a dictionary head of >= 3 letters and a tail that is itself known.
        for cut in range(len(word) - 3, 2, -1):
            head = self._dict(word[:cut])
            if head:
                tail = self._known(word[cut:], depth + 1)
                if tail:
                    return head + tail
        return None

    def phones(self, word: str) -> List[str]:
        """ARPAbet phones for ``word`` (lower-case letters, digits, apostrophes).

        Raises:
          ValueError: if the word has no letters or digits to pronounce.
        """
        word = word.lower().strip("'")
        if not re.search(r"[a-z0-9]", word):
            raise ValueError(f"nothing to pronounce in {word!r}")
        if word.isdigit():
            out: List[str] = []
            for w in spoken_number(int(word)):
                out.extend(self._dict(w) or _letters(w))
            return out
        if re.search(r"\d", word):
            # mixed like "2nd" / "1990s": digits spelled, letters by rule.
            out = []
            for part in re.findall(r"\d+|[a-z']+", word):
                if part.isdigit():
                    out.extend(self.phones(part))
                elif part in ("s", "'s") and out:
                    out = _suffix_phones(out, part)  # "1990s"
                else:
                    out.extend(self._known(part, 0) or _letters(part))
            return out
        for cand in (word, word.replace("'", "")):
            phones = self._known(cand, 0)
            if phones:
                return phones
        return _letters(word.replace("'", ""))
