"""Phonetic post-matching of hotwords (opt-in): replace hypothesis words that *sound* like a phrase.

Boosting works inside the search, so it only helps when the decoder's spelling of a name is one
of the phrase's token sequences. When tiny.en hears "Mohrenschildt" and writes "Mornscout", no
bonus can reach it. :class:`PhoneticMatcher` compares runs of 1..``max_words`` hypothesis words
with each phrase by pronunciation (espeak-ng's phoneme mnemonics, stress marks dropped, edit
distance over phoneme characters) and replaces the closest run that clears ``threshold``.

It needs the ``espeak-ng`` program (``apt install espeak-ng``); :func:`espeak_available` tells.
Words are phonemized once each (one ``espeak-ng`` call per batch of new words) and cached.

:meth:`PhoneticMatcher.correct` works on text, :meth:`~PhoneticMatcher.correct_words` on timed
words (a replaced run keeps the span of its words), :func:`correct_result` on a transcription.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from burble.asr.results import TranscriptionResult

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


@dataclass(frozen=True)
class Replacement:
    """Tokens ``start:end`` sound like a phrase: ``text`` is the phrase with their punctuation."""

    start: int
    end: int
    text: str
    score: float


class TimedWord(Protocol):
    """What :meth:`PhoneticMatcher.correct_words` needs of a word (ASR results' and streaming's alike)."""

    word: str
    start: float
    end: float
    probability: float


W = TypeVar("W", bound=TimedWord)


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
        # A capitalised phrase written in lower case ("grzegorz" for "Grzegorz") is rewritten as
        # given (a lower-case phrase is left alone: "Kubernetes" may start a sentence).
        self._spelled = {tuple(self._key(w) for w in p.split()): p for p in self.phrases if p != p.lower()}
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

    def find(self, tokens: Sequence[str]) -> list[Replacement]:
        """The runs of ``tokens`` (words as written, punctuation attached) that sound like a phrase.

        Best matches first, no overlaps; returned in text order.
        """
        parts = [_WORD.match(t.strip()) for t in tokens]
        cores = [self._key(m.group(2)) if m else "" for m in parts]
        words = [c for c in cores if c]
        by_core = dict(zip(words, self._phonemes(words)))
        candidates: list[tuple[float, int, int, str]] = []
        for start in range(len(tokens)):
            for end in range(start + 1, min(len(tokens), start + self.options.max_words) + 1):
                span = cores[start:end]
                phrase = self._spelled.get(tuple(span))
                inner_punctuation = any(parts[k] and parts[k].group(3) for k in range(start, end - 1))
                if phrase is not None and all(span) and not inner_punctuation:
                    written = [parts[k].group(2) for k in range(start, end)]  # type: ignore[union-attr]
                    if written != phrase.split():
                        candidates.append((2.0, start, end, phrase))  # before any sound-alike
                    continue
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
        found: list[Replacement] = []
        for score, start, end, phrase in sorted(candidates, key=lambda c: (-c[0], c[1])):
            if any(taken[start:end]):
                continue
            taken[start:end] = [True] * (end - start)
            lead = parts[start].group(1) if parts[start] else ""
            trail = parts[end - 1].group(3) if parts[end - 1] else ""
            found.append(Replacement(start, end, lead + phrase + trail, score))
        return sorted(found, key=lambda r: r.start)

    def correct(self, text: str) -> str:
        """``text`` with every close-sounding run replaced by its phrase (leading space kept)."""
        tokens = text.split()
        out, i = [], 0
        for r in self.find(tokens):
            out += tokens[i : r.start] + [r.text]
            i = r.end
        out += tokens[i:]
        return text[: len(text) - len(text.lstrip())] + " ".join(out)

    def correct_words(self, words: Sequence[W]) -> list[W]:
        """Timed words (Whisper style, leading spaces) with close-sounding runs replaced.

        A replaced run becomes one word from the first word's start to the last one's end, with
        the run's lowest probability; the other words are returned as they are.
        """
        out: list[W] = []
        i = 0
        for r in self.find([w.word for w in words]):
            out += words[i : r.start]
            run = words[r.start : r.end]
            space = " " if run[0].word.startswith(" ") else ""
            out.append(dataclasses.replace(
                run[0], word=space + r.text.strip(), end=run[-1].end, probability=min(w.probability for w in run)
            ))
            i = r.end
        out += words[i:]
        return out


def single_token_words(tokenizer) -> Callable[[str], bool]:
    """``word -> whether " word" is one token`` of the tokenizer (a common word)."""
    return lambda word: len(tokenizer.encode(" " + word)) == 1


def correct_result(result: "TranscriptionResult", matcher: PhoneticMatcher) -> "TranscriptionResult":
    """A copy of ``result`` whose segment texts and words have close-sounding runs replaced.

    Segment ``tokens`` stay the decoder's own (they are what it produced).
    """
    segments = [
        dataclasses.replace(
            segment,
            text=matcher.correct(segment.text),
            words=matcher.correct_words(segment.words) if segment.words is not None else None,
        )
        for segment in result.segments
    ]
    return dataclasses.replace(result, segments=segments)
