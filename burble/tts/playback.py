"""Audio between a producer that may stall and a device callback that must never wait.

A sound card asks for the next few milliseconds on its own clock. When synthesis falls behind
(a loaded machine, a slow voice) the buffer runs dry, and a naive player fills every such moment
with a few milliseconds of silence: a stutter of dozens of clicks. :class:`PlaybackBuffer` does
what media players do instead: it holds playback until ``prebuffer`` samples are waiting (or the
producer has finished), and after running dry it waits again with the prebuffer doubled, so a
producer slower than real time gives a few clean pauses that grow rarer, not a stutter.

The producer calls :meth:`write` (it never overwrites unplayed audio: it is told how much fits),
the device callback calls :meth:`fill`, and :meth:`finish` says no more audio will come, which
lets the tail play however short it is.
"""

from __future__ import annotations

import threading

import numpy as np

from burble.streaming.ring_buffer import RingBuffer


class PlaybackBuffer:
    """A ring buffer of float32 mono samples with a prebuffer that doubles after each underrun.

    Args:
      capacity: samples held; the writer waits for room rather than dropping unplayed audio.
      prebuffer: samples that must be waiting before playback (re)starts; capped at half the capacity
        so that the writer can always reach it.
      sample_rate: used for seconds in messages.
    """

    def __init__(self, capacity: int, *, prebuffer: int, sample_rate: int) -> None:
        self.ring = RingBuffer(capacity, sample_rate=sample_rate, name="speaker buffer")
        self.prebuffer = max(1, min(int(prebuffer), capacity // 2))
        self.underruns = 0
        self._playing = False
        self._finished = threading.Event()

    @property
    def pending(self) -> int:
        """Samples written and not yet played."""
        return self.ring.pending

    def room(self) -> int:
        """Samples that :meth:`write` can take now without overwriting unplayed audio."""
        return self.ring.capacity - self.ring.pending

    def write(self, samples: np.ndarray) -> None:
        """Append samples (producer side); the caller keeps ``samples.size <= room()``."""
        if samples.size > self.room():
            raise ValueError(f"{samples.size} samples do not fit: {self.room()} free")
        self.ring.write(samples)

    def finish(self) -> None:
        """No more audio will be written: play what is left, however little."""
        self._finished.set()

    def fill(self, out: np.ndarray) -> int:
        """Fill ``out`` (device side) with the next samples, silence where there are none.

        Returns:
          the number of real samples written to ``out`` (the rest is zeros).
        """
        finished = self._finished.is_set()
        if not self._playing:
            pending = self.ring.pending
            if pending >= self.prebuffer or (finished and pending):
                self._playing = True
            else:
                out[:] = 0.0
                return 0
        _, audio = self.ring.consume(out.size)
        out[: audio.size] = audio
        out[audio.size:] = 0.0
        if audio.size < out.size and not finished:
            # Ran dry mid-stream: wait for twice as much next time (the producer is slower than
            # the device by at least this much), up to the half of the ring a writer can fill.
            self.underruns += 1
            self._playing = False
            self.prebuffer = min(2 * self.prebuffer, self.ring.capacity // 2)
        return audio.size
