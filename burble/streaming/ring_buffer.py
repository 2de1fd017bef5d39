"""A fixed-size audio ring buffer addressed by absolute sample indices.

Audio enters from one producer (a PortAudio callback thread, or a network task) and leaves to one
consumer (the event loop). Every sample keeps its absolute index ``0, 1, 2, ...`` from the start
of the stream, so a word decoded from samples ``[a, b)`` keeps the audio time ``a / rate`` no
matter how often the buffer wrapped around.

Memory is fixed at ``capacity`` samples. When the consumer falls behind by more than that, the
producer overwrites (drops) the *oldest* unread samples: live audio must never block the capture
thread. Dropped samples are counted exactly in ``dropped_samples`` and the first overflow logs a
warning, so overflow is never silent.

Thread safety: one lock guards the array and the indices. Each side holds it only for at most two
``memcpy`` calls (the wrap-around splits a copy in two); dtype conversion, logging and all other
work happen outside it, so the real-time callback never waits on consumer-side work.

Example::

    ring = RingBuffer.from_seconds(30.0, sample_rate=16000)
    ring.write(block)                  # producer thread
    start, audio = ring.consume()      # consumer: everything unread, from absolute index ``start``
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

import numpy as np

from burble.audio import pcm

logger = logging.getLogger(__name__)


def to_float32(samples: np.ndarray) -> np.ndarray:
    """Convert mono PCM (float or int16) to float32 in [-1, 1].

    Args:
      samples: 1-D array; int16 is scaled by 1/32768, floats are cast (:func:`burble.audio.pcm.to_float32`).

    Raises:
      ValueError: for other integer types or arrays that are not 1-D.
    """
    samples = np.asarray(samples)
    if samples.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {samples.shape}")
    return pcm.to_float32(samples)


def _to_storage(samples: np.ndarray, dtype: np.dtype) -> np.ndarray:
    samples = np.asarray(samples)
    if samples.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {samples.shape}")
    if dtype == np.float32:
        return pcm.to_float32(samples)
    # int16 storage: scale floats, keep int16 as is (halves memory for long network buffers).
    return pcm.to_pcm16(samples)


class RingBuffer:
    """Single-producer / single-consumer mono audio ring buffer with absolute sample indices.

    Indices: ``start_index`` is the oldest sample still held, ``end_index`` one past the newest;
    ``read_index`` is the consumer's cursor (everything before it has been consumed). Samples in
    ``[read_index, end_index)`` are pending; if the producer needs their space they are dropped
    (oldest first) and added to ``dropped_samples``.

    Args:
      capacity: number of samples held (fixed memory).
      sample_rate: samples per second (only used for seconds-based properties and messages).
      dtype: storage type, ``np.float32`` (default) or ``np.int16``. Reads always return float32.
      name: used in the overflow warning.
    """

    def __init__(
        self,
        capacity: int,
        *,
        sample_rate: int = 16000,
        dtype: type = np.float32,
        name: str = "ring buffer",
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.int16)):
            raise ValueError(f"dtype must be float32 or int16, got {dtype}")
        self.capacity = int(capacity)
        self.sample_rate = int(sample_rate)
        self.name = name
        self._dtype = dtype
        self._data = np.zeros(self.capacity, dtype=dtype)
        self._lock = threading.Lock()
        self._end = 0  # absolute index one past the newest sample
        self._read = 0  # consumer cursor
        self._dropped = 0
        self._warned = False

    @classmethod
    def from_seconds(cls, seconds: float, *, sample_rate: int = 16000, **kwargs) -> "RingBuffer":
        """A buffer holding ``seconds`` of audio at ``sample_rate``."""
        if seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {seconds}")
        return cls(int(round(seconds * sample_rate)), sample_rate=sample_rate, **kwargs)

    # ----------------------------------------------------------------------------------- indices
    @property
    def end_index(self) -> int:
        """Absolute index one past the newest sample written."""
        return self._end

    @property
    def start_index(self) -> int:
        """Absolute index of the oldest sample still held."""
        return max(0, self._end - self.capacity)

    @property
    def read_index(self) -> int:
        """The consumer's cursor: samples before it were consumed (or dropped)."""
        with self._lock:
            return max(self._read, self._end - self.capacity)

    @property
    def pending(self) -> int:
        """Samples written but not consumed yet (never more than ``capacity``)."""
        with self._lock:
            return self._end - max(self._read, self._end - self.capacity)

    @property
    def dropped_samples(self) -> int:
        """Unread samples overwritten because the consumer was too slow (exact count)."""
        return self._dropped

    @property
    def dropped_seconds(self) -> float:
        return self._dropped / self.sample_rate

    # ---------------------------------------------------------------------------------- producer
    def write(self, samples: np.ndarray) -> int:
        """Append samples (producer side). Never blocks beyond a memcpy.

        Args:
          samples: 1-D float (any float dtype) or int16 mono audio.

        Returns:
          how many unread samples this write dropped (0 when the consumer keeps up).
        """
        data = _to_storage(samples, self._dtype)
        n = len(data)
        if n == 0:
            return 0
        cap = self.capacity
        if n > cap:
            # Only the newest ``cap`` samples can survive; skip copying the rest.
            skipped, data = n - cap, data[n - cap :]
        else:
            skipped = 0
        with self._lock:
            end = self._end + skipped
            pos = end % cap
            m = len(data)
            first = min(m, cap - pos)
            self._data[pos : pos + first] = data[:first]
            if first < m:
                self._data[: m - first] = data[first:]
            new_end = end + m
            # Unread samples lost: those in [read, new_end - cap) that were not already lost.
            old_valid = max(self._read, self._end - cap)
            dropped = max(0, (new_end - cap) - old_valid)
            self._end = new_end
            self._dropped += dropped
        if dropped and not self._warned:
            self._warned = True
            logger.warning(
                "%s overflow: the consumer fell behind by more than %.2f s; dropping the oldest "
                "audio (%d samples so far; see dropped_samples)",
                self.name,
                cap / self.sample_rate,
                self._dropped,
            )
        return dropped

    def fill_gap(self, n: int) -> int:
        """Advance the stream by ``n`` samples of silence (producer side).

        Used when a source reports that audio is missing (e.g. the capture thread dropped
        samples) so that absolute indices keep matching wall-clock audio time.

        Returns:
          unread samples dropped by this write, as for ``write``.
        """
        if n < 0:
            raise ValueError("gap length must be >= 0")
        if n == 0:
            return 0
        # Write zeros in capacity-sized pieces at most once: older zeros would be overwritten.
        total = 0
        skipped = max(0, n - self.capacity)
        if skipped:
            total += self._advance_dropping(skipped)
        total += self.write(np.zeros(n - skipped, dtype=self._dtype))
        return total

    def _advance_dropping(self, n: int) -> int:
        with self._lock:
            cap = self.capacity
            old_valid = max(self._read, self._end - cap)
            new_end = self._end + n
            dropped = max(0, (new_end - cap) - old_valid)
            self._end = new_end
            self._dropped += dropped
        return dropped

    # ---------------------------------------------------------------------------------- consumer
    def _copy(self, start: int, n: int) -> np.ndarray:
        # Caller holds the lock and checked the range.
        out = np.empty(n, dtype=self._dtype)
        cap = self.capacity
        pos = start % cap
        first = min(n, cap - pos)
        out[:first] = self._data[pos : pos + first]
        if first < n:
            out[first:] = self._data[: n - first]
        return out

    def _as_float(self, data: np.ndarray) -> np.ndarray:
        return pcm.to_float32(data)

    def read(self, start_index: int, n: int) -> np.ndarray:
        """Copy ``n`` samples starting at absolute index ``start_index`` (does not move the cursor).

        Raises:
          IndexError: if any of ``[start_index, start_index + n)`` is no longer (or not yet) held.
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        with self._lock:
            lo = max(0, self._end - self.capacity)
            if start_index < lo or start_index + n > self._end:
                raise IndexError(
                    f"samples [{start_index}, {start_index + n}) not in buffer [{lo}, {self._end})"
                )
            data = self._copy(start_index, n)
        return self._as_float(data)

    def read_since(self, index: int) -> tuple[int, np.ndarray]:
        """Copy everything from ``index`` (or the oldest held sample, if later) to the end.

        Does not move the cursor. Returns ``(start, samples)``; ``start > index`` means the
        samples in between were overwritten.
        """
        with self._lock:
            start = max(index, self._end - self.capacity, 0)
            n = max(0, self._end - start)
            data = self._copy(start, n)
        return start, self._as_float(data)

    def consume(self, max_samples: Optional[int] = None) -> tuple[int, np.ndarray]:
        """Take pending samples from the cursor on and advance the cursor past them.

        Args:
          max_samples: take at most this many (the oldest first); ``None`` takes everything.

        Returns:
          ``(start, samples)``: ``start`` is the absolute index of ``samples[0]``. If samples were
          dropped since the last call, ``start`` jumps past them (see ``dropped_samples``).
        """
        with self._lock:
            start = max(self._read, self._end - self.capacity)
            n = self._end - start
            if max_samples is not None:
                n = min(n, max(0, int(max_samples)))
            data = self._copy(start, n)
            self._read = start + n
        return start, self._as_float(data)

    def skip_to(self, index: int) -> int:
        """Move the cursor forward to ``index`` without reading (consumer side).

        Returns:
          how many pending samples were skipped (the caller decides how to account for them).
        """
        with self._lock:
            start = max(self._read, self._end - self.capacity)
            target = min(max(index, start), self._end)
            self._read = target
        return target - start

    def __len__(self) -> int:
        """Samples currently held (``end_index - start_index``)."""
        return self._end - self.start_index

    def __repr__(self) -> str:
        return (
            f"RingBuffer(capacity={self.capacity}, sample_rate={self.sample_rate}, "
            f"start={self.start_index}, end={self.end_index}, read={self.read_index}, "
            f"dropped={self.dropped_samples})"
        )
