"""Helpers for the streaming tests: real recordings and a deterministic fake recognizer.

(A uniquely named module rather than ``conftest`` so test files can import it unambiguously.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from burble.streaming.events import StreamEvent, Word
from burble.testing.dev_audio import dev_item, require_shared

SR = 16000


def dev_path(item_id: str) -> Path:
    """Path of a dev-audio recording (skips the test when the shared folder is missing)."""
    require_shared("dev-audio")
    return dev_item(item_id).audio_path


def dev_audio(item_id: str) -> tuple[np.ndarray, int]:
    """A dev-audio recording as float32 mono at its own rate."""
    x, sr = sf.read(str(dev_path(item_id)), dtype="float32", always_2d=True)
    return x.mean(axis=1), sr


class FakeRecognizer:
    """Deterministic stand-in for the Whisper recognizer (tests only).

    Each ``accept`` "recognises" its audio as one word spanning it: the word is first reported as
    a partial and committed (final) by the next call, like LocalAgreement would. Every call is
    recorded and the contract of the ``Recognizer`` protocol is asserted.
    """

    def __init__(self, delay: float = 0.0, keep_audio: bool = True) -> None:
        self.delay = delay
        self.keep_audio = keep_audio
        self.calls: list[tuple] = []
        self.audio: list[tuple[int, np.ndarray]] = []
        self.accepted_samples = 0
        self.segment = 0
        self._expected: int | None = None
        self._tentative: list[Word] = []
        self._committed: list[Word] = []
        self.thread_ids: set[int] = set()

    def accept(self, audio: np.ndarray, start_sample: int) -> list[StreamEvent]:
        assert audio.dtype == np.float32 and audio.ndim == 1 and len(audio) > 0
        assert self._expected is None or start_sample == self._expected, "audio within an utterance must be contiguous"
        self._expected = start_sample + len(audio)
        self.thread_ids.add(threading.get_ident())
        self.calls.append(("accept", start_sample, len(audio)))
        self.accepted_samples += len(audio)
        if self.keep_audio:
            self.audio.append((start_sample, audio.copy()))
        if self.delay:
            time.sleep(self.delay)
        events = []
        if self._tentative:
            self._committed += self._tentative
            events.append(StreamEvent.from_words("final", self._tentative, segment_id=self.segment))
        self._tentative = [Word(f" w{start_sample}", start_sample / SR, self._expected / SR)]
        events.append(StreamEvent.from_words("partial", self._tentative, segment_id=self.segment))
        return events

    def _commit_all(self) -> list[StreamEvent]:
        events = []
        if self._tentative:
            events.append(StreamEvent.from_words("final", self._tentative, segment_id=self.segment))
            self._committed += self._tentative
            self._tentative = []
        return events

    def endpoint(self, at_sample: int) -> list[StreamEvent]:
        assert self._expected is None or at_sample >= self._expected
        self.calls.append(("endpoint", at_sample))
        events = self._commit_all()
        events.append(StreamEvent.from_words("endpoint", self._committed, segment_id=self.segment))
        self.segment += 1
        self._committed = []
        self._expected = None
        return events

    def pause(self, at_sample: int) -> list[StreamEvent]:
        self.calls.append(("pause", at_sample))
        return self._commit_all()

    def flush(self) -> list[StreamEvent]:
        self.calls.append(("flush",))
        events = self._commit_all()
        if self._committed:
            events.append(StreamEvent.from_words("endpoint", self._committed, segment_id=self.segment))
        return events


class ListSink:
    def __init__(self) -> None:
        self.events: list[StreamEvent] = []
        self.closed = False

    def write(self, event: StreamEvent) -> None:
        assert not self.closed
        self.events.append(event)

    def close(self) -> None:
        self.closed = True




def whole_tail_recognizer(asr, options):
    """The default cache-aware recognizer with its padding tail encoded whole every decode
    (``near_tail_frames=None``). Scenario tests whose premise (a decode that reads "Thank you.",
    a boosted word written twice) was found with that tail pin it: the shared far padding (the
    default since 2026-12-04) changes such single decodes, not the dev set's WER (4.88% vs 4.95%;
    without the VAD 4.43% vs 4.30%)."""
    import dataclasses

    from burble.streaming.cache_aware import CacheAwareWhisperRecognizer
    from burble.streaming.factory import RecognizerChoice

    cache_options = RecognizerChoice().cache_aware_options(options)
    return CacheAwareWhisperRecognizer(asr, dataclasses.replace(cache_options, near_tail_frames=None))
