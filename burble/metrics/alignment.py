"""Forced alignment of a reference text to audio with pocketsphinx (acoustic word times).

Latency metrics need to know when each reference word *acoustically* ends, independently of the
system under test; pocketsphinx's bundled US-English acoustic model aligns a known text in about
0.02x real time. Its traps (see ``../shared/notes/environment.md``) are handled here:

- the text must be lower-case dictionary words, so it is tokenised (:func:`alignment_words`) and
  every word the CMU dictionary lacks gets phones from :class:`PronunciationGuesser` via
  ``add_word`` (without it pocketsphinx refuses the text; with wrong phones neighbours shift);
- ``hyp()``/``seg()`` are read right after the utterance, before anything else touches the decoder;
- segment words carry variant suffixes (``and(2)``) and ``<sil>`` pause entries.

Each reference token yields exactly one :class:`AlignedWord`, in order, or an error is raised.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.io import to_pcm16
from burble.audio.resample import resample
from burble.metrics.pronounce import PronunciationGuesser


class AlignmentError(RuntimeError):
    """The aligner could not fit the text to the audio."""


@dataclass(frozen=True)
class AlignedWord:
    """One reference word with its acoustic span in seconds from the start of the audio."""

    word: str
    start: float
    end: float


_SPLIT = re.compile(r"[\s\-\u2010-\u2015/]+")
_KEEP = re.compile(r"[^a-z0-9']")
_VARIANT = re.compile(r"\(\d+\)$")
_NON_WORDS = {"<sil>", "<s>", "</s>"}


def alignment_words(text: str) -> List[str]:
    """Tokenise text the way the aligner needs it: lower-case letters, digits and inner apostrophes.

    Hyphens and slashes separate words, accents are dropped, other punctuation is removed.
    Whisper's normaliser is deliberately not used: it merges number words ("twenty one" -> "21")
    and would change the word count relative to what was spoken.

    Args:
      text: any reference text.
    """
    text = unicodedata.normalize("NFKD", text.replace("\u2019", "'"))
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    words = []
    for token in _SPLIT.split(text):
        token = _KEEP.sub("", token).strip("'")
        if token:
            words.append(token)
    return words


class ForcedAligner:
    """Word-level forced alignment with pocketsphinx's bundled English model.

    Args:
      pronunciations: extra or overriding entries, word -> space-separated ARPAbet phones
        (e.g. for names the rules pronounce badly).
    """

    def __init__(self, pronunciations: Optional[Mapping[str, str]] = None) -> None:
        try:
            from pocketsphinx import Decoder
        except ImportError as e:
            raise ImportError("forced alignment needs `pip install pocketsphinx==5.1.1`") from e
        self._decoder = Decoder(lm=None, loglevel="FATAL")
        self._frame_rate = float(self._decoder.config["frate"])
        self._guesser = PronunciationGuesser(self._decoder.lookup_word)
        self._names: Dict[str, str] = {}  # token -> dictionary entry used for it
        self._lock = threading.Lock()  # one decoder: serialise users
        for word, phones in (pronunciations or {}).items():
            self._register(word.lower(), phones.split())

    def _register(self, token: str, phones: List[str]) -> str:
        # An existing entry cannot be replaced (add_word fails), so overrides get a fresh name.
        name = token if self._decoder.lookup_word(token) is None else f"{token}_burble"
        if self._decoder.lookup_word(name) is None:
            try:
                self._decoder.add_word(name, " ".join(phones), True)
            except RuntimeError as e:
                raise ValueError(f"pocketsphinx rejected pronunciation {phones} for {token!r}") from e
        self._names[token] = name
        return name

    def dictionary_name(self, token: str) -> str:
        """The dictionary entry aligned for ``token``, adding a guessed pronunciation if needed."""
        name = self._names.get(token)
        if name is not None:
            return name
        if self._decoder.lookup_word(token) is not None:
            return token
        return self._register(token, self._guesser.phones(token))

    def align(self, audio: np.ndarray, text: str, sample_rate: int = SAMPLE_RATE) -> List[AlignedWord]:
        """Align ``text`` to ``audio``.

        Args:
          audio: float mono samples in [-1, 1].
          text: what is said (any casing/punctuation; see :func:`alignment_words`).
          sample_rate: rate of ``audio`` in Hz (resampled to 16 kHz).

        Returns:
          One :class:`AlignedWord` per token of ``alignment_words(text)``, in order, times in seconds.

        Raises:
          ValueError: empty text or audio.
          AlignmentError: pocketsphinx found no alignment (e.g. audio too short for the text).
        """
        tokens = alignment_words(text)
        if not tokens:
            raise ValueError("nothing to align: the text has no words")
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or audio.size == 0:
            raise ValueError(f"expected non-empty mono audio, got shape {audio.shape}")
        pcm = to_pcm16(resample(audio, sample_rate, SAMPLE_RATE)).tobytes()
        with self._lock:
            names = [self.dictionary_name(t) for t in tokens]
            try:
                self._decoder.set_align_text(" ".join(names))
            except RuntimeError as e:
                raise AlignmentError(f"pocketsphinx refused the text: {e}") from None
            self._decoder.start_utt()
            self._decoder.process_raw(pcm, full_utt=True)
            self._decoder.end_utt()
            # Read the result first: touching the decoder before hyp()/seg() can crash it.
            hyp = self._decoder.hyp()
            segs = [(s.word, s.start_frame, s.end_frame) for s in (self._decoder.seg() or [])]
        if hyp is None or not segs:
            raise AlignmentError(
                f"no alignment for {len(tokens)} words in {len(audio) / sample_rate:.2f} s of audio "
                "(audio too short for the text, or the text does not match it)"
            )
        duration = len(pcm) / 2 / SAMPLE_RATE
        words = []
        for word, start, end in segs:
            word = _VARIANT.sub("", word)
            if word in _NON_WORDS or word.startswith(("[", "+")):
                continue
            # end_frame is inclusive: the word's last frame ends one frame later.
            # (the last frame may overhang the audio by a few ms: clamp to its end).
            words.append((word, start / self._frame_rate, min((end + 1) / self._frame_rate, duration)))
        if [w for w, _, _ in words] != names:
            raise AlignmentError(f"aligned words {[w for w, _, _ in words]} do not match the text {names}")
        return [AlignedWord(tok, start, end) for tok, (_, start, end) in zip(tokens, words)]


@functools.lru_cache(maxsize=1)
def default_aligner() -> ForcedAligner:
    """A process-wide aligner (loading the model takes ~0.5 s)."""
    return ForcedAligner()


def force_align(audio: np.ndarray, text: str, sample_rate: int = SAMPLE_RATE) -> List[AlignedWord]:
    """Align ``text`` to ``audio`` with the shared :func:`default_aligner`; see :meth:`ForcedAligner.align`."""
    return default_aligner().align(audio, text, sample_rate)
