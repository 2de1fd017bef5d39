"""Real-time factor: compute seconds per second of audio (< 1 is faster than real time)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional


def rtf(compute_seconds: float, audio_seconds: float) -> float:
    """Compute time over audio duration.

    Args:
      compute_seconds: wall (or CPU) seconds spent.
      audio_seconds: seconds of audio processed (must be > 0).
    """
    if audio_seconds <= 0:
        raise ValueError(f"audio duration must be > 0, got {audio_seconds}")
    if compute_seconds < 0:
        raise ValueError(f"compute time must be >= 0, got {compute_seconds}")
    return compute_seconds / audio_seconds


class Stopwatch:
    """Accumulating timer; use as a context manager around each timed region.

    Args:
      clock: ``time.perf_counter`` (wall) by default; ``time.process_time`` measures CPU time.

    Example::

        sw = Stopwatch()
        for chunk in chunks:
            with sw:
                recognizer.step(chunk)
        print(rtf(sw.elapsed, audio_seconds))
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started: Optional[float] = None
        self.elapsed = 0.0
        self.laps: List[float] = []

    @property
    def running(self) -> bool:
        return self._started is not None

    def start(self) -> "Stopwatch":
        if self._started is not None:
            raise RuntimeError("stopwatch already running")
        self._started = self._clock()
        return self

    def stop(self) -> float:
        """Stop and return the length of the lap just timed."""
        if self._started is None:
            raise RuntimeError("stopwatch is not running")
        lap = self._clock() - self._started
        self._started = None
        self.elapsed += lap
        self.laps.append(lap)
        return lap

    def __enter__(self) -> "Stopwatch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class RTFMeter:
    """Running totals of compute and audio time over many items (corpus RTF)."""

    compute_seconds: float = 0.0
    audio_seconds: float = 0.0
    items: int = 0
    per_item: List[float] = field(default_factory=list)

    def add(self, compute_seconds: float, audio_seconds: float) -> float:
        """Record one item; returns its own RTF."""
        value = rtf(compute_seconds, audio_seconds)
        self.compute_seconds += compute_seconds
        self.audio_seconds += audio_seconds
        self.items += 1
        self.per_item.append(value)
        return value

    @property
    def rtf(self) -> float:
        """Total compute over total audio (long items weigh more, as in throughput)."""
        return rtf(self.compute_seconds, self.audio_seconds)
