"""The standard pipeline stages and the interfaces between them.

Every stage has the same two coroutines (``Stage``): ``process(items) -> items`` and
``flush() -> items``. Items are ``AudioChunk`` (16 kHz audio with its absolute start index),
``Endpoint`` (an utterance ended) or ``StreamEvent`` (a result); a stage consumes the kinds it
understands and passes the others through in order.

- ``VADStage``: audio -> speech-only audio + ``Endpoint``s (``StreamingVAD``), and inside an
  utterance ``SpeechStop`` (no speech for a moment) and ``SpeechPause`` (past the hangover).
- ``RecognizerStage``: speech audio + endpoints -> ``StreamEvent``s, calling a ``Recognizer``
  on a worker of the compute engine (``burble.streaming.engine``), through the stream's lane.
- ``SinkStage``: events -> sinks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.vad import StreamingVAD, VADEvent
from burble.streaming.engine import Lane, default_engine
from burble.streaming.events import StreamEvent
from burble.streaming.ring_buffer import RingBuffer
from burble.streaming.sinks import Sink
from burble.streaming.sources import AudioChunk

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """The current utterance ended at absolute sample ``at_sample`` (exclusive).

    Attributes:
      at_sample: where the utterance's audio ends.
      reason: the VAD rule (``silence``, ``no_speech``, ``max_length``), ``gap`` (audio was lost)
        or ``end_of_stream``.
    """

    at_sample: int
    reason: str = "silence"
    speech_until: Optional[int] = None  # one past the utterance's last speech frame, if known


@dataclass(frozen=True)
class SpeechStop:
    """Inside an utterance, the VAD heard no speech after ``at_sample`` (its last speech frame's end)
    for ``VADStage.stop_seconds``; its hangover still runs.

    Speech may resume at once (a gap between words) or this may be the end of a phrase. A
    recognizer that decodes at pauses decodes the pending audio now, while the hangover runs out,
    so that the pause after it finds the end of speech already decoded.
    """

    at_sample: int


@dataclass(frozen=True)
class SpeechPause:
    """Inside an utterance, speech stopped for longer than the VAD's hangover at ``at_sample``.

    The utterance may go on (a pause between phrases) or end (the endpoint comes only after
    ``silence_after_speech_seconds``). Either way no audio follows for now, so the recognizer
    decodes what it has instead of waiting for a full chunk: the utterance's last words can be
    committed (AlignAtt) within the hangover plus one decode of the end of speech, or within the
    hangover alone when a decode at the :class:`SpeechStop` already covered ``speech_until``.

    Attributes:
      at_sample: where the utterance's audio ends for now (last speech frame plus hangover).
      speech_until: one past the last speech frame (``None``: unknown, decode what is pending).
    """

    at_sample: int
    speech_until: Optional[int] = None


Item = Union[AudioChunk, Endpoint, SpeechStop, SpeechPause, StreamEvent]

# Silence after a speech frame before the VAD stage sends a SpeechStop (two 32 ms VAD frames).
STOP_SECONDS = 0.064


@runtime_checkable
class Stage(Protocol):
    """One step of the pipeline."""

    async def process(self, items: list[Item]) -> list[Item]:
        """Consume the items this stage understands, return its outputs plus the rest, in order."""
        ...

    async def flush(self) -> list[Item]:
        """End of stream: return whatever the stage still holds."""
        ...


class Recognizer(Protocol):
    """A streaming recognizer (implemented in ``burble.streaming.recognizer``).

    All methods run in a worker thread, one call at a time, in stream order. Events may leave
    ``emitted_at`` as ``None``: the loop stamps it.
    """

    def accept(self, audio: np.ndarray, start_sample: int) -> list[StreamEvent]:
        """New 16 kHz float32 speech audio whose first sample has absolute index ``start_sample``.

        Consecutive calls within an utterance are contiguous. May take seconds.
        """
        ...

    def endpoint(self, at_sample: int) -> list[StreamEvent]:
        """The utterance ended at ``at_sample``: commit everything, then start a new utterance."""
        ...

    def pause(self, at_sample: int) -> list[StreamEvent]:
        """Speech stopped at ``at_sample`` (past the VAD's hangover); the utterance may go on.

        Called after all speech up to ``at_sample`` was given to ``accept`` (or, past the last
        speech frame, to ``hold``), when the stage decodes at pauses. A recognizer may commit
        words the pause completes (or do nothing).
        """
        ...

    # Optional: ``hold(audio, start_sample) -> list[StreamEvent]`` adds audio that follows the
    # last speech frame (the VAD's hangover) without decoding it, when a decode already covered
    # all the speech before it. Recognizers without it get that audio through ``accept``.
    # Optional: ``accept_steps(audio, start_sample)``, ``accept`` as a generator of batchable
    # steps (burble.streaming.engine.BatchStep) returning the events; the stage calls it
    # instead of ``accept`` so that the engine decodes many streams' windows in one batch.

    def flush(self) -> list[StreamEvent]:
        """End of stream: commit everything still pending."""
        ...


# ------------------------------------------------------------------------------------ stages
class VADStage:
    """AudioChunk -> speech-only AudioChunks and Endpoints (drops audio outside utterances).

    Forwards each utterance's audio (from its pre-roll start) as soon as the VAD is sure it
    belongs to the utterance, contiguous within the utterance, and an ``Endpoint`` at its end.
    A jump in chunk indices (lost audio) closes the open utterance with reason ``gap``.

    Inside an utterance it also says when speech stops: a ``SpeechStop`` once the VAD has heard
    ``stop_seconds`` without speech, and a ``SpeechPause`` once that silence outlasts the hangover.

    Args:
      vad: the streaming VAD.
      piece_seconds: audio handled per VAD step (bounds the look-back history it needs).
      stop_seconds: non-speech after a speech frame that makes a ``SpeechStop``.
    """

    def __init__(self, vad: StreamingVAD, *, piece_seconds: float = 2.0, stop_seconds: float = STOP_SECONDS) -> None:
        self.vad = vad
        self._stop = int(round(stop_seconds * SAMPLE_RATE))
        self._stopped_at: Optional[int] = None  # the last speech end a SpeechStop was sent for
        self._piece = int(piece_seconds * SAMPLE_RATE)
        history = piece_seconds + vad.options.lookback_seconds + 1.0
        self.history = RingBuffer.from_seconds(history, sample_rate=SAMPLE_RATE, name="VAD history")
        self._expected: Optional[int] = None
        self._fed = 0
        self._paused = False
        self.utterances = 0

    async def process(self, items: list[Item]) -> list[Item]:
        out: list[Item] = []
        for item in items:
            if isinstance(item, AudioChunk):
                self._audio(item, out)
            elif isinstance(item, Endpoint):
                # Upstream says audio is missing (or ended): the VAD owns utterance boundaries, so
                # it closes its open utterance (if any) and emits the one Endpoint downstream.
                self._handle(self.vad.flush(reason=item.reason), out)  # type: ignore[arg-type]
            else:
                out.append(item)
        return out

    async def flush(self) -> list[Item]:
        out: list[Item] = []
        self._handle(self.vad.flush(), out)
        return out

    def _audio(self, chunk: AudioChunk, out: list[Item]) -> None:
        if self._expected is None:
            self._expected = chunk.start
            self.vad.reset(chunk.start)
            self.history.fill_gap(chunk.start)  # align history indices with stream indices
            self.history.skip_to(chunk.start)
        elif chunk.start > self._expected:
            self._handle(self.vad.flush(reason="gap"), out)
            self.vad.reset(chunk.start)
            self.history.fill_gap(chunk.start - self._expected)
            self.history.skip_to(chunk.start)
        elif chunk.start < self._expected:
            raise ValueError(f"audio chunk starts at {chunk.start}, before the expected {self._expected}")
        for i in range(0, len(chunk.samples), self._piece):
            piece = chunk.samples[i : i + self._piece]
            self.history.write(piece)
            self.history.skip_to(self.history.end_index)  # read by index only: nothing "pending"
            self._handle(self.vad.process(piece), out)
        self._expected = chunk.end

    def _handle(self, events: list[VADEvent], out: list[Item]) -> None:
        for ev in events:
            if ev.kind == "start":
                self._fed = ev.sample
                self._paused = False
                self._stopped_at = None
                self.utterances += 1
            else:
                self._forward(ev.sample, out)
                out.append(Endpoint(ev.sample, ev.reason or "silence", speech_until=self.vad.last_speech_end_index))
        if self.vad.in_utterance:
            end = self.vad.speech_end
            assert end is not None
            if end > self._fed:
                self._forward(end, out)
                self._paused = False
            last_speech = self.vad.last_speech_end_index
            if last_speech != self._stopped_at and self.vad.processed_index - last_speech >= self._stop:
                out.append(SpeechStop(last_speech))
                self._stopped_at = last_speech
            # Silence past the hangover, once per pause, in the same step that forwards the
            # hangover's last audio (a step later would delay every pause decode by a tick).
            if self.vad.in_pause and not self._paused:
                out.append(SpeechPause(end, speech_until=last_speech))
                self._paused = True

    def _forward(self, end: int, out: list[Item]) -> None:
        start = self._fed
        if start < self.history.start_index:
            # Cannot happen with the history sized from the VAD options; never hide it if it does.
            logger.warning("VAD history too short: losing %d samples of speech", self.history.start_index - start)
            start = self.history.start_index
        if end > start:
            out.append(AudioChunk(self.history.read(start, end - start), start))
            self._fed = end


class RecognizerStage:
    """Speech AudioChunks, SpeechPauses and Endpoints -> StreamEvents, by calling a ``Recognizer`` on the engine.

    Every call goes through the stream's :class:`~burble.streaming.engine.Lane`: in order, one
    at a time, on a worker thread of the compute engine (never the event loop's shared pool,
    which would give each call a thread of its own and torch's per-thread buffers with it).
    ``close`` drops the lane's queued calls.

    Args:
      recognizer: the streaming recognizer.
      chunk_seconds: gather at least this much speech audio per ``accept`` call (endpoints,
        speech stops and pauses if ``decode_at_pauses``, and the end of the stream pass on
        whatever is pending).
      decode_at_pauses: at a ``SpeechStop``, decode pending audio; at a ``SpeechPause``, pass on
        pending audio and call the recognizer's ``pause`` (otherwise both are ignored). Audio
        after the speech a decode already covered goes to the recognizer's ``hold`` (if it has
        one), not to a decode, before a pause or an endpoint. ``None``: the recognizer's
        ``decodes_at_pauses`` attribute decides (``False`` when it has none).
      lane: the stream's lane of a shared engine (the server's); ``None``: a lane of the
        process's one-worker engine (``burble stream``, ``listen``).

    Attributes:
      calls: recognizer calls made (accept, endpoint, flush).
      busy_seconds: wall time spent inside the recognizer.
      audio_seconds: speech audio given to ``accept``.
    """

    def __init__(
        self,
        recognizer: Recognizer,
        *,
        chunk_seconds: float = 1.0,
        decode_at_pauses: Optional[bool] = None,
        lane: Optional[Lane] = None,
    ) -> None:
        if chunk_seconds <= 0:
            raise ValueError("chunk_seconds must be > 0")
        self.recognizer = recognizer
        self._chunk = int(round(chunk_seconds * SAMPLE_RATE))
        if decode_at_pauses is None:
            decode_at_pauses = bool(getattr(recognizer, "decodes_at_pauses", False))
        self.decode_at_pauses = decode_at_pauses
        self._pending: list[AudioChunk] = []
        self._decoded_until = -1  # end of the audio the last accept call decoded
        self.calls = 0
        self.busy_seconds = 0.0
        self.audio_seconds = 0.0
        self.lane = lane

    @property
    def pending_samples(self) -> int:
        return sum(len(c) for c in self._pending)

    async def _call(self, fn: Callable[..., Any], *args: int | np.ndarray, steps: bool = False) -> list[Item]:
        if self.lane is None:
            self.lane = default_engine().lane()
        t = time.perf_counter()
        events = await (self.lane.call_steps(fn, *args) if steps else self.lane.call(fn, *args))
        self.busy_seconds += time.perf_counter() - t
        self.calls += 1
        return list(events)

    def _take_pending(self) -> tuple[np.ndarray, int]:
        chunks, self._pending = self._pending, []
        audio = chunks[0].samples if len(chunks) == 1 else np.concatenate([c.samples for c in chunks])
        self.audio_seconds += len(audio) / SAMPLE_RATE
        return audio, chunks[0].start

    async def _accept(self) -> list[Item]:
        if not self._pending:
            return []
        audio, start = self._take_pending()
        self._decoded_until = start + len(audio)
        # In steps where the recognizer has them: the engine then decodes this window in one
        # batch with other streams' (burble.streaming.engine).
        accept_steps = getattr(self.recognizer, "accept_steps", None)
        if accept_steps is not None:
            return await self._call(accept_steps, audio, start, steps=True)
        return await self._call(self.recognizer.accept, audio, start)

    async def _pass_on(self, speech_until: Optional[int]) -> list[Item]:
        """Hand over the pending audio before a pause or an endpoint: decoded, unless the last
        decode covered all speech up to ``speech_until`` and the recognizer can ``hold`` the
        rest (the hangover's silence), so the pause or endpoint has no decode to wait for."""
        hold = getattr(self.recognizer, "hold", None)
        if (not self.decode_at_pauses or hold is None or speech_until is None or self._decoded_until < speech_until
                or not self._pending):
            return await self._accept()
        audio, start = self._take_pending()
        return await self._call(hold, audio, start)

    async def process(self, items: list[Item]) -> list[Item]:
        out: list[Item] = []
        for item in items:
            if isinstance(item, AudioChunk):
                if len(item) == 0:
                    continue
                if self._pending and item.start != self._pending[-1].end:
                    out += await self._accept()  # not contiguous: never glue separate audio
                self._pending.append(item)
            elif isinstance(item, Endpoint):
                out += await self._pass_on(item.speech_until)
                out += await self._call(self.recognizer.endpoint, item.at_sample)
            elif isinstance(item, SpeechStop):
                if self.decode_at_pauses:
                    out += await self._accept()  # the end of a phrase, maybe: have it decoded by the pause
            elif isinstance(item, SpeechPause):
                if self.decode_at_pauses:
                    out += await self._pass_on(item.speech_until)  # nothing more is coming for now
                    out += await self._call(self.recognizer.pause, item.at_sample)
            else:
                out.append(item)
        if self.pending_samples >= self._chunk:
            out += await self._accept()
        return out

    async def flush(self) -> list[Item]:
        out = await self._accept()
        out += await self._call(self.recognizer.flush)
        return out

    def close(self) -> None:
        """Drop the stream's queued calls (a call still running after a cancel finishes on its own)."""
        if self.lane is not None:
            self.lane.close()


class SinkStage:
    """StreamEvents -> sinks (terminal, JSON lines, SRT, a socket ...). Passes other items on."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)

    async def process(self, items: list[Item]) -> list[Item]:
        rest: list[Item] = []
        for item in items:
            if isinstance(item, StreamEvent):
                for sink in self.sinks:
                    sink.write(item)
            else:
                rest.append(item)
        return rest

    async def flush(self) -> list[Item]:
        return []

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


