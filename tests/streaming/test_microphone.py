"""The real capture path: a recording played into a PulseAudio virtual microphone, captured by
``MicrophoneSource`` through PortAudio (no sound card needed; see burble.testing.virtual_mic)."""

import asyncio
import time

import numpy as np
import pytest

from burble.streaming.loop import PipelineOptions, asr_pipeline
from burble.streaming.sources import AudioChunk, MicrophoneSource
from burble.streaming.vad import VADOptions
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


def test_pipeline_on_the_microphone_gets_the_speech_and_an_endpoint(vmic):
    reference, _ = dev_audio(ITEM)
    rec, sink = FakeRecognizer(), ListSink()

    async def main():
        mic = MicrophoneSource()
        pipe = asr_pipeline(mic, rec, [sink], vad=VADOptions(), options=PipelineOptions(chunk_seconds=1.0))
        run = asyncio.create_task(pipe.run())
        while mic.callbacks == 0:  # wait for the stream (opened by the pipeline) to deliver audio
            await asyncio.sleep(0.02)
        await asyncio.to_thread(vmic.play, dev_path(ITEM))
        await asyncio.sleep(1.5)  # trailing silence: the VAD's rule 2 endpoint (0.8 s) fires
        pipe.stop()
        return await run

    metrics = asyncio.run(main())
    assert [c[0] for c in rec.calls].count("endpoint") >= 1
    # Put the speech the recognizer got back on the stream's timeline (zeros where the VAD saw
    # no speech): the played recording must be found there intact.
    end = max(start + len(x) for start, x in rec.audio)
    timeline = np.zeros(end, np.float32)
    for start, x in rec.audio:
        timeline[start : start + len(x)] = x
    lag, corr = locate(timeline, reference)
    assert corr > 0.99
    speech = sum(len(x) for _, x in rec.audio)
    assert 0.8 * len(reference) <= speech <= len(reference) + int(1.0 * SR)  # pauses out, pre-roll in
    assert metrics.dropped_seconds == 0
    assert sink.closed and sink.events[-1].type == "endpoint"
    assert all(e.emitted_at is not None for e in sink.events)
