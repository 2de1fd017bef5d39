"""Streaming latency: AWED (average word emission delay) and first-partial latency.

AWED, per reference word the system got right: the time the word was *emitted* (on the audio
clock of a real-time stream: seconds since the stream's first sample began to play) minus the
time the word *acoustically ended* (from a forced alignment of the reference text, see
:mod:`burble.metrics.alignment`, so the system under test does not grade its own timings).
Emitted words are matched to reference words by a minimum-edit alignment of the two word
sequences; by default only exact matches count, because a misrecognised word has no meaningful
"time it was recognised". Delays are reported as median and 90th percentile. A negative delay
(a word emitted before its acoustic end, e.g. a confident guess of the last syllable) is kept
as is rather than clipped, so the statistics are not biased upward.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence

import numpy as np

from burble.metrics.alignment import AlignedWord, alignment_words
from burble.metrics.wer import align_word_sequences


@dataclass(frozen=True)
class EmittedWord:
    """A word as the system under test emitted it.

    Attributes:
      word: its text (any casing/punctuation; a hyphenated word covers several reference words).
      emitted_at: seconds on the audio clock when it was emitted (see :class:`AudioClock`).
    """

    word: str
    emitted_at: float


@dataclass(frozen=True)
class WordDelay:
    """A matched word: acoustic end (reference alignment) and emission time, in seconds."""

    ref_index: int
    word: str
    acoustic_end: float
    emitted_at: float

    @property
    def delay(self) -> float:
        return self.emitted_at - self.acoustic_end


@dataclass(frozen=True)
class LatencySummary:
    """Distribution of per-word delays in seconds (NaN statistics when nothing matched).

    Attributes:
      count: words with a delay.
      reference_words: words in the reference(s) (``count / reference_words`` = coverage).
    """

    count: int
    reference_words: int
    median: float
    p90: float
    mean: float
    max: float

    @classmethod
    def from_delays(cls, delays: Iterable[float], reference_words: int) -> "LatencySummary":
        values = np.asarray(list(delays), dtype=np.float64)
        if values.size == 0:
            nan = math.nan
            return cls(0, reference_words, nan, nan, nan, nan)
        return cls(
            count=int(values.size),
            reference_words=reference_words,
            median=float(np.median(values)),
            p90=float(np.percentile(values, 90)),
            mean=float(values.mean()),
            max=float(values.max()),
        )


def match_emitted_words(
    emitted: Sequence[EmittedWord],
    reference: Sequence[AlignedWord],
    *,
    include_substitutions: bool = False,
) -> List[WordDelay]:
    """Pair emitted words with reference words and their acoustic ends.

    Args:
      emitted: the system's words in output order (each word once, e.g. when committed).
      reference: forced-aligned reference words (tokens of :func:`alignment_words`).
      include_substitutions: also pair words aligned as substitutions.

    Returns:
      One :class:`WordDelay` per matched reference word, in reference order.
    """
    # Emitted words are tokenised like the reference ("second-floor," -> second, floor), each
    # piece keeping the emission time of its word.
    keys: List[str] = []
    times: List[float] = []
    for w in emitted:
        for token in alignment_words(w.word):
            keys.append(token)
            times.append(float(w.emitted_at))
    ref_keys = [w.word for w in reference]
    wanted = ("equal", "substitute") if include_substitutions else ("equal",)
    out = []
    for op, r, h in align_word_sequences(ref_keys, keys):
        if op in wanted:
            out.append(WordDelay(r, reference[r].word, reference[r].end, times[h]))
    return out


def awed(
    emitted: Sequence[EmittedWord],
    reference: Sequence[AlignedWord],
    *,
    include_substitutions: bool = False,
) -> LatencySummary:
    """AWED of one stream: median / p90 of emission time minus acoustic word end."""
    delays = match_emitted_words(emitted, reference, include_substitutions=include_substitutions)
    return LatencySummary.from_delays((d.delay for d in delays), len(reference))


def pooled_awed(per_stream: Iterable[Sequence[WordDelay]], reference_words: int) -> LatencySummary:
    """Pool word delays of several streams into one distribution (every word weighs the same)."""
    return LatencySummary.from_delays((d.delay for ds in per_stream for d in ds), reference_words)


def first_partial_latency(events: Iterable[Any], reference: Sequence[AlignedWord]) -> Optional[float]:
    """Time from the acoustic start of the first reference word to the first non-empty result.

    Args:
      events: stream events in emission order, dicts or objects with ``type``, ``text`` or
        ``words`` and ``emitted_at`` (audio clock seconds); any type with words counts.
      reference: forced-aligned reference words.

    Returns:
      Seconds, or ``None`` when no event carried text.
    """
    if not reference:
        raise ValueError("first-partial latency needs at least one reference word")
    for event in events:
        if _event_words(event) or str(_field(event, "text", "") or "").strip():
            return float(_field(event, "emitted_at")) - reference[0].start
    return None


def words_from_events(events: Iterable[Any], types: Sequence[str] = ("final",)) -> List[EmittedWord]:
    """Emitted words from a stream's events, each stamped with its event's ``emitted_at``.

    Assumes events of ``types`` carry only newly emitted words (e.g. ``final`` events carry the
    words committed by that step, as in ``burble stream --json``), so each word appears once.
    """
    out = []
    for event in events:
        if _field(event, "type") in types:
            at = float(_field(event, "emitted_at"))
            out.extend(EmittedWord(str(_field(w, "word") if not isinstance(w, str) else w), at)
                       for w in _event_words(event))
    return out


def _field(obj: Any, name: str, default: Any = ...) -> Any:
    if isinstance(obj, dict):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, default)
    if value is ...:
        raise KeyError(f"event lacks {name!r}: {obj!r}")
    return value


def _event_words(event: Any) -> list:
    return list(_field(event, "words", None) or [])


class AudioClock:
    """Seconds since a real-time stream's audio started (the time base of ``emitted_at``).

    Call :meth:`start` when the first sample is handed to the source (played into the virtual
    microphone, or paced from a file); :meth:`now` then reads the audio clock.
    """

    def __init__(self) -> None:
        self._t0: Optional[float] = None

    def start(self, at: Optional[float] = None) -> None:
        """Set time zero (a ``time.monotonic()`` value; default: now)."""
        self._t0 = time.monotonic() if at is None else at

    def now(self) -> float:
        if self._t0 is None:
            raise RuntimeError("AudioClock.now() before start()")
        return time.monotonic() - self._t0
