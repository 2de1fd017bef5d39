"""What the streaming pipeline emits: words with times, and partial / final / endpoint events.

Event semantics (the recognizer produces them, sinks consume them):

- ``partial``: the current *uncommitted* hypothesis (words that may still change). Each partial
  replaces the previous one; its ``text`` is only the uncommitted tail.
- ``final``: words just *committed* (they never change again). Successive finals of a segment
  concatenate to the segment's text.
- ``endpoint``: the utterance (segment ``segment_id``) ended (VAD endpoint or end of stream). Its
  ``text``/``words`` repeat the whole committed utterance for consumers that only want segments.

Times: ``start``/``end`` of words and events are seconds of *audio* time (absolute sample index
divided by the 16 kHz rate, from the first sample of the stream). ``emitted_at`` is wall-clock
seconds since the stream's first sample was captured (the event loop stamps it when the event
leaves the recognizer; recognizers leave it ``None``), so ``emitted_at - word.end`` is the delay
with which a word reached the user (AWED) when audio is paced in real time.

JSON (``to_json``): one object per line for ``--json``::

    {"type": "final", "text": " hello world", "words": [{"word": " hello", "start": 0.5, "end": 0.8},
     ...], "start": 0.5, "end": 1.2, "emitted_at": 1.93, "segment_id": 0}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

EventType = Literal["partial", "final", "endpoint"]
EVENT_TYPES: tuple[str, ...] = ("partial", "final", "endpoint")


def _round(x: float) -> float:
    # Millisecond resolution is finer than any word timing Whisper gives and keeps JSON short.
    return round(float(x), 3)


@dataclass(frozen=True)
class Word:
    """One recognised word.

    Attributes:
      word: the text as decoded, including its leading space (Whisper style), e.g. ``" hello"``.
      start: audio time in seconds where the word starts.
      end: audio time in seconds where the word ends.
      probability: the model's confidence in [0, 1] (``nan`` when unknown).
    """

    word: str
    start: float
    end: float
    probability: float = math.nan

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"word {self.word!r} ends ({self.end}) before it starts ({self.start})")

    def to_dict(self) -> dict[str, Any]:
        """``{"word", "start", "end"}`` (the documented JSON shape; probability is internal)."""
        return {"word": self.word, "start": _round(self.start), "end": _round(self.end)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Word":
        return cls(
            word=d["word"],
            start=float(d["start"]),
            end=float(d["end"]),
            probability=float(d.get("probability", math.nan)),
        )


def words_text(words: Sequence[Word]) -> str:
    """Join words as decoded (Whisper words carry their own leading spaces)."""
    return "".join(w.word for w in words)


@dataclass(frozen=True)
class StreamEvent:
    """A partial, final or endpoint result.

    Attributes:
      type: ``"partial"``, ``"final"`` or ``"endpoint"`` (see the module docstring).
      text: the event's text (for partial: the uncommitted tail; final: the newly committed words;
        endpoint: the whole committed utterance).
      words: the words behind ``text`` with audio times.
      start: audio time (s) the event covers from (first word start, or the utterance start).
      end: audio time (s) the event covers to.
      emitted_at: wall-clock seconds since the stream's first sample; stamped by the event loop.
      segment_id: index of the utterance (VAD segment) the event belongs to, from 0.
    """

    type: EventType
    text: str
    words: tuple[Word, ...] = ()
    start: float = 0.0
    end: float = 0.0
    emitted_at: Optional[float] = None
    segment_id: int = 0

    def __post_init__(self) -> None:
        if self.type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, got {self.type!r}")
        if not isinstance(self.words, tuple):
            object.__setattr__(self, "words", tuple(self.words))

    @classmethod
    def from_words(
        cls,
        type: EventType,
        words: Sequence[Word],
        *,
        segment_id: int = 0,
        start: Optional[float] = None,
        end: Optional[float] = None,
    ) -> "StreamEvent":
        """Build an event whose text, start and end follow from its words.

        Args:
          type: event type.
          words: the words (may be empty, e.g. an endpoint of an utterance with no speech).
          segment_id: utterance index.
          start: override the start time (default: first word's start, or 0).
          end: override the end time (default: last word's end, or ``start``).
        """
        words = tuple(words)
        s = start if start is not None else (words[0].start if words else 0.0)
        e = end if end is not None else (words[-1].end if words else s)
        return cls(type=type, text=words_text(words), words=words, start=s, end=e, segment_id=segment_id)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``type``, ``text``, ``words`` [``word``, ``start``, ``end``], ``start``,
        ``end``, ``emitted_at``, ``segment_id``."""
        return {
            "type": self.type,
            "text": self.text,
            "words": [w.to_dict() for w in self.words],
            "start": _round(self.start),
            "end": _round(self.end),
            "emitted_at": None if self.emitted_at is None else _round(self.emitted_at),
            "segment_id": self.segment_id,
        }

    def to_json(self) -> str:
        """One line of JSON (no newline inside), UTF-8 text kept as is."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(", ", ": "))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StreamEvent":
        """Inverse of ``to_dict`` (word probabilities are not serialised and come back ``nan``)."""
        return cls(
            type=d["type"],
            text=d["text"],
            words=tuple(Word.from_dict(w) for w in d.get("words", ())),
            start=float(d.get("start", 0.0)),
            end=float(d.get("end", 0.0)),
            emitted_at=None if d.get("emitted_at") is None else float(d["emitted_at"]),
            segment_id=int(d.get("segment_id", 0)),
        )

    @classmethod
    def from_json(cls, line: str) -> "StreamEvent":
        return cls.from_dict(json.loads(line))
