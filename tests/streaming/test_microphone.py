"""The real capture path: a recording played into a PulseAudio virtual microphone, captured by
``MicrophoneSource`` through PortAudio (no sound card needed; see burble.testing.virtual_mic)."""

import asyncio
import contextlib
import time

import numpy as np
import pytest

from burble.streaming.loop import Pipeline, PipelineOptions, asr_pipeline
from burble.streaming.sources import AudioChunk, MicrophoneSource
from burble.streaming.stages import Endpoint
from burble.audio.vad import FRAME_SAMPLES, VADOptions
from burble.testing.virtual_mic import VirtualMicrophone, unavailable_reason

from streaming_helpers import SR, FakeRecognizer, ListSink, dev_audio, dev_path

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"virtual microphone: {unavailable_reason()}")

ITEM = "ls_1089-134691-0001"  # 5.4 s of LibriSpeech
SHORT_ITEM = "ls_1089-134691-0000"  # 2.1 s


def locate(captured: np.ndarray, reference: np.ndarray) -> tuple[int, float]:
    """Offset of ``reference`` inside ``captured`` (FFT cross-correlation) and the correlation there."""
    n = len(captured) + len(reference)
    cc = np.fft.irfft(np.fft.rfft(captured, n) * np.conj(np.fft.rfft(reference, n)), n)
    lag = int(np.argmax(cc[: len(captured)]))
    seg = captured[lag : lag + len(reference)]
    return lag, float(np.corrcoef(seg, reference[: len(seg)])[0, 1])


@pytest.fixture(scope="module")
def vmic():
    with VirtualMicrophone() as vm:
        yield vm


async def open_and_wait(mic: MicrophoneSource) -> None:
    await mic.open()
    # PortAudio's first callback can take ~1 s: audio played before it would be lost.
    assert await asyncio.to_thread(mic.wait_started, 10.0), "no audio callback from PortAudio"


def test_capture_matches_the_played_recording(vmic):
    reference, sr = dev_audio(SHORT_ITEM)
    assert sr == SR

    async def main() -> tuple[list[AudioChunk], float]:
        mic = MicrophoneSource()
        assert mic.input_rate == SR  # the virtual device takes 16 kHz directly
        await open_and_wait(mic)
        chunks: list[AudioChunk] = []

        async def reader():
            while (c := await mic.read()) is not None:
                chunks.append(c)

        task = asyncio.create_task(reader())
        t = time.monotonic()
        await asyncio.to_thread(vmic.play, dev_path(SHORT_ITEM))
        await asyncio.sleep(0.3)
        mic.stop()
        await task
        wall = time.monotonic() - t
        await mic.close()
        assert mic.dropped_seconds == 0
        assert mic.callbacks <= wall * 60 + 60  # ~20 ms blocks, not a flood of tiny callbacks
        return chunks, wall

    chunks, wall = asyncio.run(main())
    for a, b in zip(chunks, chunks[1:]):
        assert b.start == a.end
    captured = np.concatenate([c.samples for c in chunks])
    lag, corr = locate(captured, reference)
    assert corr > 0.99, f"captured audio does not match the recording (corr {corr:.3f})"
    assert lag + len(reference) <= len(captured), "the end of the recording was not captured"
    # Amount of audio: everything played, at the real-time rate (no gaps, no duplication).
    assert len(captured) / SR == pytest.approx(wall, abs=0.5)
    assert len(captured) >= len(reference)


class EndpointTap:
    """A stage after the VAD: records each Endpoint it passes on, with how much audio the
    microphone had delivered by then and whether ``stop()`` had been called yet."""

    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = pipe
        self.stopped = False
        self.seen: list[tuple[Endpoint, int, bool]] = []
        self.fired = asyncio.Event()

    async def process(self, items):
        for item in items:
            if isinstance(item, Endpoint):
                self.seen.append((item, self.pipe.ring.end_index, self.stopped))
                self.fired.set()
        return items

    async def flush(self):
        return []


def run_microphone_pipeline(vmic, vad: VADOptions, wait_for_endpoint: float):
    """Play ITEM into the microphone through ``asr_pipeline``; after the playback, wait up to
    ``wait_for_endpoint`` seconds for the VAD to end the utterance, then ``stop()``."""
    rec, sink = FakeRecognizer(), ListSink()

    async def main():
        mic = MicrophoneSource()
        pipe = asr_pipeline(mic, rec, [sink], vad=vad, options=PipelineOptions(chunk_seconds=1.0))
        tap = EndpointTap(pipe)
        pipe.stages.insert(1, tap)  # between the VAD and the recognizer
        run = asyncio.create_task(pipe.run())
        while mic.callbacks == 0:  # wait for the stream (opened by the pipeline) to deliver audio
            await asyncio.sleep(0.02)
        await asyncio.to_thread(vmic.play, dev_path(ITEM))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(tap.fired.wait(), wait_for_endpoint)
        tap.stopped = True
        pipe.stop()
        return await run, tap

    metrics, tap = asyncio.run(main())
    return rec, sink, metrics, tap


def test_pipeline_on_the_microphone_gets_the_speech_and_a_rule_2_endpoint(vmic):
    reference, _ = dev_audio(ITEM)
    vad = VADOptions()
    rec, sink, metrics, tap = run_microphone_pipeline(vmic, vad, wait_for_endpoint=3 * vad.silence_after_speech_seconds)

    # The endpoint came from the VAD's rule 2 while the microphone was still capturing, not from
    # stop(), which flushes one of its own ("end_of_stream") for an utterance still open.
    assert [(e.reason, stopped) for e, _, stopped in tap.seen] == [("silence", False)], tap.seen
    endpoint, captured_by_then, _ = tap.seen[0]
    # Rule 2 needs its trailing silence captured first: the endpoint sits a hangover past the last
    # speech, and the microphone had delivered the rule's silence after that speech before it fired.
    speech_end = endpoint.at_sample - int(vad.hangover_seconds * SR)
    frame = FRAME_SAMPLES
    assert captured_by_then - speech_end >= int(vad.silence_after_speech_seconds * SR) - frame
    # ... and it closes the played recording: after its speech, not beyond its end.
    end = max(start + len(x) for start, x in rec.audio)
    timeline = np.zeros(end, np.float32)
    for start, x in rec.audio:  # the speech the recognizer got, on the stream's timeline
        timeline[start : start + len(x)] = x
    lag, corr = locate(timeline, reference)
    assert corr > 0.99  # the played recording is there intact
    assert lag + 0.8 * len(reference) <= endpoint.at_sample <= lag + len(reference) + int(vad.hangover_seconds * SR) + frame
    assert [c for c in rec.calls if c[0] == "endpoint"] == [("endpoint", endpoint.at_sample)]
    assert rec.calls[-1] == ("flush",)  # stop() flushed, and had no utterance left to end

    speech = sum(len(x) for _, x in rec.audio)
    assert 0.8 * len(reference) <= speech <= len(reference) + int(1.0 * SR)  # pauses out, pre-roll in
    assert metrics.dropped_seconds == 0
    assert sink.closed and [e.type for e in sink.events].count("endpoint") == 1 and sink.events[-1].type == "endpoint"
    assert all(e.emitted_at is not None for e in sink.events)


def test_negative_control_without_rule_2_only_stop_ends_the_utterance(vmic):
    """The same run with rule 2 out of reach (60 s of silence needed): the old assertions (an
    endpoint reached the recognizer, the last event is an endpoint) still hold, because stop()
    flushed one; the check above tells them apart."""
    vad = VADOptions(silence_after_speech_seconds=60.0, silence_no_speech_seconds=60.0)
    rec, sink, _, tap = run_microphone_pipeline(vmic, vad, wait_for_endpoint=1.5)
    assert [c[0] for c in rec.calls].count("endpoint") >= 1 and sink.events[-1].type == "endpoint"
    assert [(e.reason, stopped) for e, _, stopped in tap.seen] == [("end_of_stream", True)]
