import asyncio
import threading
import time

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio

from burble.audio.resample import resample
from burble.streaming.sources import ArraySource, AudioChunk, FileSource, PushSource, downmix

from streaming_helpers import dev_audio, dev_path


async def drain(source) -> list[AudioChunk]:
    chunks = []
    async with source:
        while (chunk := await source.read()) is not None:
            chunks.append(chunk)
    return chunks


def joined(chunks: list[AudioChunk]) -> np.ndarray:
    for a, b in zip(chunks, chunks[1:]):
        assert b.start == a.end, "chunks must be contiguous"
    assert chunks[0].start == 0
    return np.concatenate([c.samples for c in chunks])


def test_file_source_fast_gives_the_file_exactly():
    path = dev_path("ls_1089-134691-0000")
    x, sr = dev_audio("ls_1089-134691-0000")
    src = FileSource(path, realtime=False)
    assert not src.live
    chunks = asyncio.run(drain(src))
    np.testing.assert_array_equal(joined(chunks), x)
    assert src.start_time is not None


def test_file_source_resamples_8khz_to_16khz(tmp_path):
    # The Gettysburg reading is a narrow-band (8 kHz) recording; store it at 8 kHz.
    x, sr = dev_audio("ibm_05-gettysburg-address-2min")
    x8 = torchaudio.functional.resample(torch.from_numpy(x[: sr * 20]), sr, 8000).numpy()
    path = tmp_path / "gettysburg_8k.wav"
    sf.write(str(path), x8, 8000, subtype="PCM_16")
    src = FileSource(path, realtime=False)
    assert src.input_rate == 8000
    y = joined(asyncio.run(drain(src)))
    assert len(y) == 2 * len(x8)
    ref = torchaudio.functional.resample(torch.from_numpy(sf.read(str(path), dtype="float32")[0]), 8000, 16000).numpy()
    assert np.corrcoef(y, ref)[0, 1] > 0.999


def test_realtime_pacing_follows_the_audio_clock():
    x = np.zeros(16000, np.float32)  # 1 s of audio at 4x speed: about 0.25 s
    src = ArraySource(x, realtime=True, speed=4.0, block_seconds=0.05)
    t = time.monotonic()
    chunks = asyncio.run(drain(src))
    elapsed = time.monotonic() - t
    assert elapsed >= 0.24  # never faster than the (4x) audio clock
    assert elapsed < 2.0  # and not absurdly slower (loose: the machine is shared)
    assert sum(len(c) for c in chunks) == 16000


def test_stop_ends_a_file_early():
    async def main():
        src = ArraySource(np.zeros(16000 * 60, np.float32), realtime=True, speed=10.0)
        n = 0
        async with src:
            while (chunk := await src.read()) is not None:
                n += len(chunk)
                if n >= 16000:
                    src.stop()
        return n

    n = asyncio.run(main())
    assert 16000 <= n < 16000 * 2


def test_repeat_loops_the_recording():
    x = np.arange(1000, dtype=np.float32) / 1000
    chunks = asyncio.run(drain(ArraySource(x, realtime=False, repeat=3, block_seconds=0.01)))
    np.testing.assert_array_equal(joined(chunks), np.tile(x, 3))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        FileSource(tmp_path / "nope.wav")
    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    with pytest.raises(ValueError):
        FileSource(bad)


def test_downmix():
    stereo = np.stack([np.ones(4, np.float32), np.zeros(4, np.float32)], axis=1)
    np.testing.assert_array_equal(downmix(stereo), np.full(4, 0.5, np.float32))
    assert downmix(np.zeros((4, 1), np.int16)).shape == (4,)


def test_push_source_from_a_thread_at_48khz(lj_speech):
    """A producer thread pushes 48 kHz stereo int16 blocks (like a sound card); the consumer gets
    the same speech at 16 kHz with contiguous indices."""
    x48 = resample(lj_speech[: 16000 * 3], 16000, 48000)
    pcm = np.clip(np.round(x48 * 32767), -32768, 32767).astype(np.int16)
    stereo = np.stack([pcm, pcm], axis=1)
    src = PushSource(48000, buffer_seconds=5.0)

    def produce():
        for i in range(0, len(stereo), 480):
            src.push(stereo[i : i + 480])
            time.sleep(0.0005)
        src.end()

    t = threading.Thread(target=produce)
    t.start()
    chunks = asyncio.run(drain(src))
    t.join()
    y = joined(chunks)
    assert abs(len(y) - 16000 * 3) <= 1
    assert np.corrcoef(y[: 16000 * 3 - 100], lj_speech[: 16000 * 3 - 100])[0, 1] > 0.995
    assert src.dropped_seconds == 0.0


def test_push_source_overflow_becomes_an_index_gap():
    src = PushSource(16000, buffer_seconds=0.5, block_seconds=0.01)

    async def main():
        src.push(np.ones(1600, np.float32))
        first = await src.read()
        src.push(np.ones(16000, np.float32))  # 1 s into a 0.5 s buffer while the consumer waits
        src.end()
        rest = []
        while (c := await src.read()) is not None:
            rest.append(c)
        return first, rest

    first, rest = asyncio.run(main())
    assert first.start == 0 and first.end == 1600
    assert src.dropped_seconds == pytest.approx(0.5)
    assert rest[0].start == 1600 + 8000  # the lost half second is skipped, not squeezed out
    assert rest[-1].end == 1600 + 16000


def test_push_source_stop_ends_reading_while_the_producer_goes_on():
    src = PushSource(16000, block_seconds=0.01)
    running = threading.Event()
    running.set()

    def produce():
        while running.is_set():
            src.push(np.zeros(160, np.float32))
            time.sleep(0.002)

    t = threading.Thread(target=produce)
    t.start()

    async def main():
        n = 0
        while (c := await src.read()) is not None:
            n += len(c)
            if n >= 1600:
                src.stop()
        return n

    try:
        n = asyncio.run(asyncio.wait_for(main(), timeout=5.0))
    finally:
        running.clear()
        t.join()
    assert n >= 1600
