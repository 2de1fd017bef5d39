"""The asyncio event loop that drives a streaming pipeline: source -> RingBuffer -> stages.

::

    source.read() --ingest task--> RingBuffer (16 kHz, absolute indices, bounded)
                                        |
                        tick: consume pending audio as one AudioChunk
                                        v
        VADStage (speech chunks + Endpoint) -> RecognizerStage (StreamEvents) -> SinkStage

**Stages** (``burble.streaming.stages``) share one small interface (``Stage``): ``await process(items) -> items`` and
``await flush() -> items``. Items are ``AudioChunk``, ``Endpoint`` or ``StreamEvent``; a stage
consumes what it understands and passes everything else through, so stages compose freely.

**Recognizer** (implemented by the ASR layer; see ``Recognizer``) is called by
``RecognizerStage`` on a worker thread of the compute engine (``burble.streaming.engine``), so a
decode that takes seconds never blocks capture or the loop.

**Back-pressure and lag.** Each tick takes *all* audio that arrived since the previous tick, so
when the recognizer is slower than real time its next call simply gets more audio (coalescing):
a re-decoding recognizer pays per call, not per second, and catches up. Pending audio is bounded
by the ring buffer (``PipelineOptions.buffer_seconds``); a live source that gets further ahead
than that loses its oldest audio, which is counted (``PipelineMetrics.dropped_seconds``), logged,
and turned into an ``Endpoint(reason="gap")`` so the recognizer commits what it has. The lag
(how far processing is behind the newest captured audio) is measured every tick and reported.
A non-live source (a file read as fast as possible) is never dropped: the ingest task waits
for room in the ring buffer instead, and ticks are ``tick_seconds`` long so the recognizer sees
the same ``chunk_seconds`` calls it would live.

**Shutdown.** ``Pipeline.stop()`` (e.g. on Ctrl-C, see ``run_until_interrupted``) ends the
source; the loop drains the ring buffer, flushes every stage in order (VAD closes the utterance,
the recognizer commits its final words) and closes the sinks, so no result is lost.

**Times.** Stages see absolute 16 kHz sample indices. The loop stamps each new ``StreamEvent``'s
``emitted_at`` with wall-clock seconds since the source captured sample 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.vad import StreamingVAD, VADOptions
from burble.streaming.engine import Lane
from burble.streaming.events import StreamEvent
from burble.streaming.ring_buffer import RingBuffer
from burble.streaming.sinks import Sink
from burble.streaming.sources import AudioChunk, AudioSource
from burble.streaming.stages import Endpoint, Item, Recognizer, RecognizerStage, SinkStage, Stage, VADStage

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class PipelineOptions:
    """Event loop settings.

    Attributes:
      chunk_seconds: speech audio to gather before each recognizer call (when the recognizer is
        behind, calls get everything pending instead).
      tick_seconds: how often new audio is taken from the ring buffer (VAD/endpoint
        responsiveness; for non-live sources the exact step).
      buffer_seconds: the most audio that may wait for processing; beyond it a live source's
        oldest audio is dropped (so this is also the worst-case lag).
      lag_warning_seconds: log a warning when processing falls this far behind.
      decode_at_pauses: call the recognizer at once when the VAD reports a ``SpeechStop`` or a
        ``SpeechPause`` instead of waiting for a full chunk (earlier final words at utterance
        ends; a pause after a decoded stop has no decode left to wait for). ``None``
        (the default): the recognizer's ``decodes_at_pauses`` decides: AlignAtt yes (it commits
        the words before a pause there), LocalAgreement-2 no (the extra decodes raised its
        committed WER over all of dev-audio from 4.6% to 6.2%, tiny.en, 1 s chunks).
    """

    chunk_seconds: float = 1.0
    tick_seconds: float = 0.1
    buffer_seconds: float = 10.0
    lag_warning_seconds: float = 3.0
    decode_at_pauses: Optional[bool] = None

    def __post_init__(self) -> None:
        if self.chunk_seconds <= 0 or self.tick_seconds <= 0:
            raise ValueError("chunk_seconds and tick_seconds must be > 0")
        if self.buffer_seconds < 2 * self.tick_seconds:
            raise ValueError("buffer_seconds must be at least two ticks")


@dataclass
class PipelineMetrics:
    """What the loop measured (updated live; ``Pipeline.run`` returns the final values).

    Attributes:
      audio_seconds: audio received from the source (including gaps it reported).
      processed_seconds: audio that went through the stages.
      lag_seconds: the latest lag: captured but not yet processed audio, in seconds.
      max_lag_seconds: the largest lag seen.
      dropped_seconds: audio lost (ring overflow in the loop + gaps reported by the source).
      source_dropped_seconds: of which the source's own capture buffer lost.
      recognizer_calls: calls of accept/endpoint/flush.
      recognizer_seconds: wall time spent inside the recognizer.
      recognizer_audio_seconds: speech audio given to ``accept``.
      events: count of emitted events per type.
      wall_seconds: time from start to the end of the shutdown.
    """

    audio_seconds: float = 0.0
    processed_seconds: float = 0.0
    lag_seconds: float = 0.0
    max_lag_seconds: float = 0.0
    dropped_seconds: float = 0.0
    source_dropped_seconds: float = 0.0
    recognizer_calls: int = 0
    recognizer_seconds: float = 0.0
    recognizer_audio_seconds: float = 0.0
    events: dict[str, int] = field(default_factory=lambda: {"partial": 0, "final": 0, "endpoint": 0})
    wall_seconds: float = 0.0

    @property
    def rtf(self) -> float:
        """Recognizer compute time per second of audio received."""
        return self.recognizer_seconds / self.audio_seconds if self.audio_seconds else 0.0

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["rtf"] = self.rtf
        return d


# ---------------------------------------------------------------------------------- pipeline
class Pipeline:
    """Runs ``source`` through ``stages`` on an asyncio event loop (see the module docstring).

    Args:
      source: where audio comes from.
      stages: the chain, e.g. ``[VADStage, RecognizerStage, SinkStage]``.
      options: loop settings.
    """

    def __init__(
        self,
        source: AudioSource,
        stages: Sequence[Stage],
        options: PipelineOptions = PipelineOptions(),
    ) -> None:
        self.source = source
        self.stages = list(stages)
        self.options = options
        self.metrics = PipelineMetrics()
        self.ring = RingBuffer.from_seconds(options.buffer_seconds, sample_rate=SAMPLE_RATE, name="pipeline buffer")
        self._tick = max(1, int(round(options.tick_seconds * SAMPLE_RATE)))
        self._gap_samples = 0
        self._gaps: deque[tuple[int, int]] = deque()  # (start, length) of gaps the source reported
        self._next = 0  # index of the next sample to process
        self._eof = False
        self._lagging = False
        self._started_at: Optional[float] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._wake: Optional[asyncio.Event] = None
        self._room: Optional[asyncio.Event] = None

    # ---------------------------------------------------------------------------- control
    def stop(self) -> None:
        """Request a clean shutdown (thread-safe): end the source, drain, flush, close sinks."""
        loop = self._loop
        if loop is not None and loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._request_stop)
                return
        self._request_stop()

    def _request_stop(self) -> None:
        self.source.stop()
        if self._wake is not None:
            self._wake.set()

    def clock(self) -> float:
        """Wall-clock seconds since the source captured sample 0 (or since ``run`` started)."""
        t0 = self.source.start_time if self.source.start_time is not None else self._started_at
        return time.monotonic() - t0 if t0 is not None else 0.0

    # ---------------------------------------------------------------------------- running
    async def run(self) -> PipelineMetrics:
        """Run until the source ends (or ``stop``), flush every stage, close sinks and source."""
        self._loop = asyncio.get_running_loop()
        self._wake, self._room = asyncio.Event(), asyncio.Event()
        self._started_at = time.monotonic()
        await self.source.open()
        ingest = asyncio.create_task(self._ingest(), name="burble-ingest")
        try:
            await self._consume(ingest)
            await self._flush_stages()
        finally:
            if not ingest.done():
                ingest.cancel()
                await asyncio.gather(ingest, return_exceptions=True)
            for stage in self.stages:
                close = getattr(stage, "close", None)
                if close is not None:
                    close()
            await self.source.close()
            self._update_drop_metrics()
            self.metrics.wall_seconds = time.monotonic() - self._started_at
        return self.metrics

    async def _ingest(self) -> None:
        assert self._wake is not None and self._room is not None
        try:
            while True:
                chunk = await self.source.read()
                if chunk is None:
                    break
                gap = chunk.start - self.ring.end_index
                if gap < 0:
                    raise ValueError(f"source chunk starts at {chunk.start}, inside audio already received")
                if gap:
                    # The source lost audio: keep indices on wall-clock time (the ring holds
                    # silence there) and remember the span, so stages get an Endpoint, not zeros.
                    self._gaps.append((self.ring.end_index, gap))
                    self.ring.fill_gap(gap)
                    self._gap_samples += gap
                    self.metrics.audio_seconds += gap / SAMPLE_RATE
                samples = chunk.samples
                # Non-live sources wait for room; pieces keep each write below the capacity.
                step = self.ring.capacity // 2
                for i in range(0, len(samples), step):
                    piece = samples[i : i + step]
                    if not self.source.live:
                        while self.ring.pending + len(piece) > self.ring.capacity:
                            self._room.clear()
                            await self._room.wait()
                    self.ring.write(piece)
                    self.metrics.audio_seconds += len(piece) / SAMPLE_RATE
                    self._wake.set()
        finally:
            self._eof = True
            self._wake.set()

    async def _consume(self, ingest: asyncio.Task) -> None:
        assert self._wake is not None and self._room is not None
        live = self.source.live
        while True:
            while self.ring.pending < self._tick and not self._eof:
                self._wake.clear()
                await self._wake.wait()
            if ingest.done() and ingest.exception() is not None:
                raise ingest.exception()  # type: ignore[misc]
            start, samples = self.ring.consume(None if live else self._tick)
            self._room.set()
            if len(samples) == 0:
                if self._eof and self.ring.pending == 0:
                    return
                continue
            items: list[Item] = []
            if start > self._next:
                items.append(Endpoint(self._next, "gap"))  # the ring overflowed: audio was lost
            items += self._split_gaps(start, samples)
            await self._run_stages(items)
            self._next = start + len(samples)
            self.metrics.processed_seconds += len(samples) / SAMPLE_RATE
            self._update_drop_metrics()
            if live:
                self._update_lag()

    def _split_gaps(self, start: int, samples: np.ndarray) -> list[Item]:
        """The consumed audio as chunks, with an Endpoint instead of each source gap in it."""
        items: list[Item] = []
        end = start + len(samples)
        pos = start
        while self._gaps and self._gaps[0][0] < end:
            g_start, g_len = self._gaps[0]
            g_end = g_start + g_len
            if g_end <= pos:  # already behind us (e.g. overwritten by an overflow)
                self._gaps.popleft()
                continue
            if g_start > pos:
                items.append(AudioChunk(samples[pos - start : g_start - start], pos))
            if pos <= g_start:
                items.append(Endpoint(g_start, "gap"))
            pos = min(g_end, end)
            if g_end <= end:
                self._gaps.popleft()
            else:
                break
        if pos < end:
            items.append(AudioChunk(samples[pos - start :], pos))
        return items

    async def _run_stages(self, items: list[Item], first: int = 0) -> list[Item]:
        for stage in self.stages[first:]:
            items = await stage.process(items)
            self._stamp(items)
        return items

    async def _flush_stages(self) -> None:
        carried: list[Item] = []
        for stage in self.stages:
            carried = await stage.process(carried)
            self._stamp(carried)
            flushed = await stage.flush()
            self._stamp(flushed)
            carried += flushed

    def _stamp(self, items: list[Item]) -> None:
        now = None
        for i, item in enumerate(items):
            if isinstance(item, StreamEvent) and item.emitted_at is None:
                now = self.clock() if now is None else now
                items[i] = dataclasses.replace(item, emitted_at=now)
                self.metrics.events[item.type] = self.metrics.events.get(item.type, 0) + 1

    def _update_drop_metrics(self) -> None:
        m = self.metrics
        recognizers = [s for s in self.stages if isinstance(s, RecognizerStage)]
        if recognizers:
            m.recognizer_calls = sum(r.calls for r in recognizers)
            m.recognizer_seconds = sum(r.busy_seconds for r in recognizers)
            m.recognizer_audio_seconds = sum(r.audio_seconds for r in recognizers)
        m.dropped_seconds = (self.ring.dropped_samples + self._gap_samples) / SAMPLE_RATE
        m.source_dropped_seconds = self.source.dropped_seconds

    def _update_lag(self) -> None:
        m = self.metrics
        # Audio captured but not processed yet (what was dropped no longer waits: it is counted
        # in dropped_seconds instead), so the lag never exceeds buffer_seconds.
        lag = (self.ring.end_index - max(self._next, self.ring.start_index)) / SAMPLE_RATE
        m.lag_seconds = lag
        m.max_lag_seconds = max(m.max_lag_seconds, lag)
        if lag >= self.options.lag_warning_seconds and not self._lagging:
            self._lagging = True
            logger.warning(
                "processing is %.1f s behind real time (recognizer %.2f s per second of audio); "
                "audio older than %.1f s is dropped",
                lag,
                m.rtf,
                self.options.buffer_seconds,
            )
        elif lag < self.options.lag_warning_seconds / 2:
            self._lagging = False


def asr_pipeline(
    source: AudioSource,
    recognizer: Recognizer,
    sinks: Sequence[Sink],
    *,
    vad: Union[StreamingVAD, VADOptions, None] = VADOptions(),
    options: PipelineOptions = PipelineOptions(),
    lane: Optional[Lane] = None,
) -> Pipeline:
    """The standard chain: ``source -> [VADStage] -> RecognizerStage -> SinkStage``.

    Args:
      source: audio source.
      recognizer: the streaming recognizer.
      sinks: where events go.
      vad: a ``StreamingVAD``, ``VADOptions`` to build one (silero; the default: Whisper then
        never sees silence or noise to hallucinate on), or ``None`` to send all audio to the
        recognizer (no endpoints except at gaps and the end).
      options: loop settings (``chunk_seconds`` is passed to the recognizer stage).
      lane: where the recognizer's calls run (a server session's lane of the server's engine);
        ``None``: the process's one-worker engine.
    """
    stages: list[Stage] = []
    if isinstance(vad, VADOptions):
        vad = StreamingVAD(vad)
    if vad is not None:
        stages.append(VADStage(vad))
    stages.append(RecognizerStage(
        recognizer, chunk_seconds=options.chunk_seconds, decode_at_pauses=options.decode_at_pauses, lane=lane
    ))  # fmt: skip
    stages.append(SinkStage(sinks))
    return Pipeline(source, stages, options)


def run_until_interrupted(pipeline: Pipeline) -> PipelineMetrics:
    """Run a pipeline with ``asyncio.run``; the first Ctrl-C stops it cleanly (results are
    flushed), a second one aborts (``KeyboardInterrupt``)."""

    async def main() -> PipelineMetrics:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        presses = 0

        def on_sigint() -> None:
            nonlocal presses
            presses += 1
            if presses == 1:
                logger.info("stopping: flushing final results (Ctrl-C again to abort)")
                pipeline.stop()
            elif task is not None:
                task.cancel()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / Windows
            installed = False
        try:
            return await pipeline.run()
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
