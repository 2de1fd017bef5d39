"""``NetworkSource``: audio arriving in WebSocket frames, fed into the standard pipeline.

It is a ``PushSource`` (capture ring buffer -> streaming resampler -> 16 kHz chunks), so network
audio takes exactly the path microphone audio takes; the connection task pushes decoded frames.

Two pacing modes, chosen by the client's ``realtime`` start field:

- real time (``live=True``): frames are pushed as they arrive; if recognition falls behind, the
  pipeline drops the oldest audio (counted), like a microphone would.
- faster than real time (``live=False``): the connection task waits for room in the capture
  buffer before pushing (``wait_for_room``) and so stops reading the socket; TCP flow control
  then slows the client down. Nothing is dropped.
"""

from __future__ import annotations

import asyncio

import numpy as np

from burble.streaming.sources import PushSource


class NetworkSource(PushSource):
    """A ``PushSource`` for one WebSocket session.

    Args:
      input_rate: the client's sample rate.
      live: real-time client (drop on overload) or fast client (back-pressure).
      buffer_seconds: capture buffer size.
      name: used in log messages.
    """

    def __init__(self, input_rate: int, *, live: bool = True, buffer_seconds: float = 5.0, name: str = "network source") -> None:
        # 20 ms polling: the pipeline works in 100 ms ticks, finer polling only burns CPU per session.
        super().__init__(input_rate, buffer_seconds=buffer_seconds, block_seconds=0.05, poll_seconds=0.02, name=name)
        self.live = live
        self.received_samples = 0

    def push(self, samples: np.ndarray) -> None:
        self.received_samples += len(samples)
        super().push(samples)

    @property
    def received_seconds(self) -> float:
        return self.received_samples / self.input_rate

    async def wait_for_room(self, frames: int) -> None:
        """Wait until ``frames`` more input samples fit without dropping (fast clients only).

        Returns at once for a live source, for a frame larger than the whole buffer (it is
        pushed anyway; the ring keeps its newest part and counts the rest), or once the
        source has ended.
        """
        if self.live:
            return
        ring = self.ring
        frames = min(frames, ring.capacity)
        while ring.pending + frames > ring.capacity and not self.finished:
            await asyncio.sleep(self._poll)
