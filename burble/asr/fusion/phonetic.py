"""Phonetic post-matching of hotwords (opt-in): replace hypothesis words that *sound* like a phrase.

Boosting works inside the search, so it only helps when the decoder's spelling of a name is one
of the phrase's token sequences. When tiny.en hears "Mohrenschildt" and writes "Mornscout", no
bonus can reach it. :class:`PhoneticMatcher` compares runs of 1..``max_words`` hypothesis words
with each phrase by pronunciation (espeak-ng's phoneme mnemonics, stress marks dropped, edit
distance over phoneme characters) and replaces the closest run that clears ``threshold``.

It needs the ``espeak-ng`` program (``apt install espeak-ng``); :func:`espeak_available` tells.
Words are phonemized once each (one ``espeak-ng`` call per batch of new words) and cached.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

Phonemizer = Callable[[Sequence[str]], list[str]]

_STRESS = re.compile(r"[',%=_:]")  # stress and length marks: "Austin" 'O:stIn and O:stIn alike
_WORD = re.compile(r"^(\W*)([\w'\-]+?)(\W*)$")


@dataclass(frozen=True)
class PhoneticOptions:
    """When a run of hypothesis words is replaced by a phrase.

    Attributes:
      threshold: least similarity (1 - phoneme edit distance / longer length) to replace.
      max_words: longest run of hypothesis words compared with a phrase.
      min_phonemes: phrases shorter than this (in phoneme characters) are never matched: short
        names sound like too many common words.
    """

    threshold: float = 0.75
    max_words: int = 3
    min_phonemes: int = 5

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if self.max_words < 1:
            raise ValueError("max_words must be >= 1")


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def espeak_phonemes(words: Sequence[str]) -> list[str]:
    """espeak-ng phoneme mnemonics of each word (stress and length marks dropped)."""
    if not words:
        return []
    if not espeak_available():
        raise RuntimeError("phonetic matching needs espeak-ng (apt install espeak-ng)")
    out = subprocess.run(
        ["espeak-ng", "-q", "-x"], input="\n".join(words), capture_output=True, text=True, check=True
    ).stdout.split("\n")
    lines = [line.strip() for line in out if line.strip()]
    if len(lines) != len(words):  # espeak joined or split a line: ask word by word
        lines = [subprocess.run(["espeak-ng", "-q", "-x", w], capture_output=True, text=True, check=True).stdout.strip()
                 for w in words]
    return [_STRESS.sub("", line).replace(" ", "") for line in lines]


def similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / the longer length (1: identical)."""
    if not a or not b:
        return 0.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1.0 - previous[-1] / max(len(a), len(b))


class PhoneticMatcher:
    """Replaces hypothesis word runs that sound like a phrase with the phrase.

    Args:
      phrases: the hotwords (as written in the output when matched).
      options: threshold and run length.
      phonemizer: words -> phoneme strings (default: espeak-ng).
      common: predicate for a common word (e.g. one BPE token of the model's vocabulary with its
        leading space): a run of common words only is never replaced ("over" is not "Dover",
        "rose" not "Rosy": measured on the LJ Speech controls, 2 of 15 falsely replaced without it).
    """

    def __init__(self, phrases: Sequence[str], options: PhoneticOptions = PhoneticOptions(),
                 phonemizer: Phonemizer = espeak_phonemes, common: Optional[Callable[[str], bool]] = None) -> None:
        self.options = options
        self._common = common or (lambda word: False)
        self._phonemize = phonemizer
        self._cache: dict[str, str] = {}
        self.phrases = [" ".join(p.split()) for p in phrases]
        self._words = {self._key(w) for p in self.phrases for w in p.split()}
        self._targets = [(p, "".join(self._phonemes([self._key(w) for w in p.split()]))) for p in self.phrases]
        self._targets = [(p, ph) for p, ph in self._targets if len(ph) >= options.min_phonemes]

    @staticmethod
    def _key(word: str) -> str:
        return word.lower().strip(".,;:!?\"'()[]")

    def _phonemes(self, words: Sequence[str]) -> list[str]:
        missing = list(dict.fromkeys(w for w in words if w not in self._cache))
        if missing:
            self._cache.update(zip(missing, self._phonemize(missing)))
        return [self._cache[w] for w in words]

    def correct(self, text: str) -> str:
        """``text`` with every close-sounding run replaced by its phrase (best matches first, no overlaps)."""
        tokens = text.split()
        parts = [_WORD.match(t) for t in tokens]
        cores = [self._key(m.group(2)) if m else "" for m in parts]
        phonemes = self._phonemes([c for c in cores if c])
        by_core = dict(zip([c for c in cores if c], phonemes))
        candidates: list[tuple[float, int, int, str]] = []
        for start in range(len(tokens)):
            for end in range(start + 1, min(len(tokens), start + self.options.max_words) + 1):
                span = cores[start:end]
                if not all(span) or any(c in self._words for c in span):
                    continue  # punctuation-only tokens, or a word of a phrase already
                if all(self._common(c) for c in span):
                    continue  # ordinary words: the decoder heard them as such
                if any(parts[k] and parts[k].group(3) for k in range(start, end - 1)):
                    break  # punctuation inside the run: a clause boundary
                sound = "".join(by_core[c] for c in span)
                for phrase, target in self._targets:
                    if not 0.6 <= len(sound) / len(target) <= 1.6:
                        continue
                    score = similarity(sound, target)
                    if score >= self.options.threshold:
                        candidates.append((score, start, end, phrase))
        taken = [False] * len(tokens)
        replacements: dict[int, tuple[int, str]] = {}
        for score, start, end, phrase in sorted(candidates, key=lambda c: (-c[0], c[1])):
            if any(taken[start:end]):
                continue
            taken[start:end] = [True] * (end - start)
            replacements[start] = (end, phrase)
        out, i = [], 0
        while i < len(tokens):
            if i in replacements:
                end, phrase = replacements[i]
                lead = parts[i].group(1) if parts[i] else ""
                trail = parts[end - 1].group(3) if parts[end - 1] else ""
                out.append(lead + phrase + trail)
                i = end
            else:
                out.append(tokens[i])
                i += 1
        return " ".join(out)


def single_token_words(tokenizer) -> Callable[[str], bool]:
    """``word -> whether " word" is one token`` of the tokenizer (a common word)."""
    return lambda word: len(tokenizer.encode(" " + word)) == 1
