"""The playback buffer's policy, driven by hand: a device callback that asks on its own clock and a
producer that stalls."""

from __future__ import annotations

import numpy as np
import pytest

from burble.streaming.ring_buffer import RingBuffer
from burble.tts.playback import PlaybackBuffer


def _device(buffer: PlaybackBuffer, calls: int, frames: int = 10) -> np.ndarray:
    out = []
    for _ in range(calls):
        block = np.full(frames, np.nan, dtype=np.float32)
        buffer.fill(block)
        out.append(block)
    return np.concatenate(out)


def _runs_of_silence(audio: np.ndarray) -> int:
    """Maximal runs of zeros strictly between the first and the last sound."""
    sound = np.flatnonzero(audio != 0)
    inner = audio[sound[0]:sound[-1] + 1] == 0
    return int(np.sum(inner[1:] & ~inner[:-1]))


def test_playback_waits_for_the_prebuffer_then_plays_in_order():
    buffer = PlaybackBuffer(100, prebuffer=30, sample_rate=1000)
    buffer.write(np.arange(1, 21, dtype=np.float32))
    assert not _device(buffer, 3).any()  # 20 < 30 waiting: silence, nothing consumed
    assert buffer.pending == 20
    buffer.write(np.arange(21, 41, dtype=np.float32))
    played = _device(buffer, 4)
    np.testing.assert_array_equal(played, np.arange(1, 41, dtype=np.float32))
    assert buffer.underruns == 0


def test_a_stalling_producer_gives_few_pauses_not_a_stutter():
    # The producer writes 7 samples per device call of 10: slower than real time. Without the
    # prebuffer policy every call would end in a gap (the negative control below); with it, each
    # underrun doubles the wait, so the pauses grow rarer.
    def run(prebuffer: int) -> tuple[np.ndarray, PlaybackBuffer]:
        buffer = PlaybackBuffer(1000, prebuffer=prebuffer, sample_rate=1000)
        played, value = [], 1.0
        for _ in range(60):
            buffer.write(np.arange(value, value + 7, dtype=np.float32))
            value += 7
            played.append(_device(buffer, 1))
        buffer.finish()
        played.append(_device(buffer, 60))
        return np.concatenate(played), buffer

    played, buffer = run(prebuffer=20)
    sound = played[played != 0]
    np.testing.assert_array_equal(sound, np.arange(1, 421, dtype=np.float32))  # everything, in order
    assert _runs_of_silence(played) == buffer.underruns <= 5
    # The negative control: the same producer into a plain ring buffer, played as it comes.
    ring, stutter, value = RingBuffer(1000, sample_rate=1000), [], 1.0
    for _ in range(120):
        if value < 421:
            ring.write(np.arange(value, value + 7, dtype=np.float32))
            value += 7
        _, audio = ring.consume(10)
        stutter.append(np.pad(audio, (0, 10 - audio.size)))
    stutter = np.concatenate(stutter)
    np.testing.assert_array_equal(stutter[stutter != 0], np.arange(1, 421, dtype=np.float32))
    assert _runs_of_silence(stutter) > 40


def test_finish_plays_a_tail_shorter_than_the_prebuffer():
    buffer = PlaybackBuffer(100, prebuffer=40, sample_rate=1000)
    buffer.write(np.ones(15, dtype=np.float32))
    assert not _device(buffer, 1).any()
    buffer.finish()
    played = _device(buffer, 2)
    assert played[:15].all() and not played[15:].any()
    assert buffer.underruns == 0 and buffer.pending == 0


def test_write_refuses_more_than_there_is_room_for():
    buffer = PlaybackBuffer(50, prebuffer=10, sample_rate=1000)
    buffer.write(np.ones(40, dtype=np.float32))
    assert buffer.room() == 10
    with pytest.raises(ValueError, match="do not fit"):
        buffer.write(np.ones(11, dtype=np.float32))
    assert buffer.pending == 40
