"""Cutting recordings into decoder windows (at most 30 s each) for batched transcription.

Batched decoding treats every window on its own (no text carried from one window to the next), so
where windows are cut matters: a cut in the middle of a word loses it. Three strategies:

* ``fixed``: consecutive 30 s windows (cheap, cuts anywhere);
* ``vad``: silero-vad utterances (:func:`burble.audio.vad.detect_speech`) merged greedily
  into contiguous chunks of at most 30 s, so cuts fall in pauses and long silences are skipped
  (the approach of faster-whisper's ``BatchedInferencePipeline`` and WhisperX);
* ``auto``: a recording of at most 30 s is one window (exactly what long-form transcription
  decodes first), a longer one is cut by VAD.

A chunk keeps the original time axis (it is a slice ``[start, end)`` of the recording, silences
inside it included), so segment times are the chunk offset plus times inside the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from burble.asr.frontend import CHUNK_LENGTH
from burble.audio import SAMPLE_RATE

Segmentation = Literal["auto", "vad", "fixed"]
SEGMENTATIONS: tuple[str, ...] = ("auto", "vad", "fixed")


@dataclass(frozen=True)
class Chunk:
    """A slice ``[start, end)`` of a recording, in 16 kHz samples."""

    start: int
    end: int

    @property
    def offset(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def duration(self) -> float:
        return (self.end - self.start) / SAMPLE_RATE


def fixed_chunks(num_samples: int, max_seconds: float = CHUNK_LENGTH) -> list[Chunk]:
    """Consecutive windows of ``max_seconds`` covering ``num_samples`` samples."""
    step = int(max_seconds * SAMPLE_RATE)
    return [Chunk(start, min(start + step, num_samples)) for start in range(0, num_samples, step)]


def merge_spans(spans: list[tuple[int, int]], max_samples: int) -> list[Chunk]:
    """Merge sorted speech spans into contiguous chunks of at most ``max_samples``.

    A span longer than ``max_samples`` on its own is split into fixed pieces.
    """
    chunks: list[Chunk] = []
    current: Optional[list[int]] = None
    for start, end in spans:
        if end <= start:
            continue
        if current is not None and end - current[0] <= max_samples:
            current[1] = end
            continue
        if current is not None:
            chunks.append(Chunk(*current))
        while end - start > max_samples:
            chunks.append(Chunk(start, start + max_samples))
            start += max_samples
        current = [start, end]
    if current is not None:
        chunks.append(Chunk(*current))
    return chunks


def vad_chunks(audio: np.ndarray, max_seconds: float = CHUNK_LENGTH, vad_model=None) -> list[Chunk]:
    """Speech chunks of at most ``max_seconds`` found by silero-vad (none for silence).

    Args:
      audio: 16 kHz mono samples.
      max_seconds: the longest chunk (30 s: one Whisper window).
      vad_model: a per-frame speech model (default: a new ``SileroVAD``; pass one to reuse it).
    """
    from burble.audio.vad import VADOptions, detect_speech

    if vad_model is not None:
        vad_model.reset()
    spans = detect_speech(audio, VADOptions(max_utterance_seconds=max_seconds), model=vad_model)
    return merge_spans(spans, int(max_seconds * SAMPLE_RATE))


class Segmenter:
    """Cuts recordings into windows with one strategy, reusing one VAD model.

    Args:
      mode: ``auto``, ``vad`` or ``fixed``.
      max_seconds: the longest window (at most 30 s).
    """

    def __init__(self, mode: str = "auto", max_seconds: float = CHUNK_LENGTH) -> None:
        if mode not in SEGMENTATIONS:
            raise ValueError(f"segmentation must be one of {SEGMENTATIONS}, not {mode!r}")
        if not 0 < max_seconds <= CHUNK_LENGTH:
            raise ValueError(f"max_seconds must be in (0, {CHUNK_LENGTH}]")
        self.mode = mode
        self.max_seconds = max_seconds
        self._vad = None

    def __call__(self, audio: np.ndarray) -> list[Chunk]:
        n = len(audio)
        if n == 0:
            return []
        if self.mode == "fixed" or (self.mode == "auto" and n <= self.max_seconds * SAMPLE_RATE):
            return fixed_chunks(n, self.max_seconds)
        if self._vad is None:
            from burble.audio.vad import SileroVAD

            self._vad = SileroVAD()
        return vad_chunks(audio, self.max_seconds, self._vad)
