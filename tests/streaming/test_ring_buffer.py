import logging
import threading
import time

import numpy as np
import pytest

from burble.streaming.ring_buffer import RingBuffer, to_float32


def ramp(start: int, n: int) -> np.ndarray:
    # Sample value = its absolute index (exact in float32 below 2**24).
    return np.arange(start, start + n, dtype=np.float32)


def test_absolute_indices_survive_wraparound():
    ring = RingBuffer(10)
    for i in range(0, 37, 3):
        ring.write(ramp(i, 3))
    assert ring.end_index == 39
    assert ring.start_index == 29
    assert len(ring) == 10
    np.testing.assert_array_equal(ring.read(30, 9), ramp(30, 9))
    start, data = ring.read_since(25)
    assert start == 29
    np.testing.assert_array_equal(data, ramp(29, 10))
    with pytest.raises(IndexError):
        ring.read(28, 2)  # overwritten
    with pytest.raises(IndexError):
        ring.read(35, 5)  # not written yet


def test_consume_moves_cursor_and_respects_max_samples():
    ring = RingBuffer(100)
    ring.write(ramp(0, 30))
    start, a = ring.consume(max_samples=10)
    assert start == 0 and len(a) == 10
    start, b = ring.consume()
    assert start == 10
    np.testing.assert_array_equal(b, ramp(10, 20))
    assert ring.pending == 0
    start, c = ring.consume()
    assert start == 30 and len(c) == 0
    assert ring.dropped_samples == 0


def test_int16_input_is_converted():
    ring = RingBuffer(8)
    ring.write(np.array([0, 16384, -32768, 32767], dtype=np.int16))
    _, data = ring.consume()
    assert data.dtype == np.float32
    np.testing.assert_allclose(data, [0.0, 0.5, -1.0, 32767 / 32768])


def test_int16_storage_roundtrip():
    ring = RingBuffer(8, dtype=np.int16)
    ring.write(np.array([0.0, 0.5, -1.0, 0.25], dtype=np.float32))
    _, data = ring.consume()
    assert data.dtype == np.float32
    np.testing.assert_allclose(data, [0.0, 0.5, -1.0, 0.25], atol=1 / 32768)


@pytest.mark.parametrize("bad", [np.zeros((4, 2), np.float32), np.zeros(4, np.int32)])
def test_bad_input_is_rejected(bad):
    with pytest.raises(ValueError):
        RingBuffer(8).write(bad)
    with pytest.raises(ValueError):
        to_float32(bad)


def test_overflow_drops_oldest_and_counts_exactly(caplog):
    ring = RingBuffer(100, name="test ring")
    ring.write(ramp(0, 60))
    ring.consume(max_samples=20)  # consumer read [0, 20), then stalls
    with caplog.at_level(logging.WARNING, logger="burble.streaming.ring_buffer"):
        assert ring.write(ramp(60, 70)) == 10  # 40 pending + 70 new in 100 slots: [20, 30) lost
        # Pending is now [30, 130). 250 more keep only [280, 380): the 100 pending and the first
        # 150 new samples are lost.
        assert ring.write(ramp(130, 250)) == 250
    assert ring.dropped_samples == 10 + 250
    warnings = [r for r in caplog.records if "overflow" in r.getMessage()]
    assert len(warnings) == 1  # warned once, not per write
    start, data = ring.consume()
    assert start == 280
    np.testing.assert_array_equal(data, ramp(280, 100))
    # Samples consumed + dropped account for every sample written.
    assert 20 + ring.dropped_samples + len(data) == 380


def test_overwriting_consumed_samples_is_not_a_drop():
    ring = RingBuffer(10)
    for i in range(0, 100, 5):
        ring.write(ramp(i, 5))
        ring.consume()
    assert ring.dropped_samples == 0


def test_fill_gap_keeps_time_and_counts_overflow():
    ring = RingBuffer(10)
    ring.write(ramp(0, 4))
    ring.consume()
    ring.fill_gap(3)
    ring.write(ramp(7, 2))
    start, data = ring.consume()
    assert start == 4
    np.testing.assert_array_equal(data, [0, 0, 0, 7, 8])
    ring.fill_gap(1000)  # far more than capacity: indices advance, no giant allocation
    assert ring.end_index == 1009
    assert ring.dropped_samples == 990


def test_stalled_consumer_with_real_producer_thread():
    """A producer thread writes at its own pace while the consumer sleeps; every sample is either
    consumed exactly once, with its correct index, or counted as dropped."""
    rate = 16000
    ring = RingBuffer.from_seconds(0.25, sample_rate=rate)
    block, blocks = 160, 400  # 64000 samples = 4 s of audio, produced as fast as possible
    consumed: list[tuple[int, np.ndarray]] = []
    done = threading.Event()

    def producer() -> None:
        for b in range(blocks):
            ring.write(ramp(b * block, block))
            if b % 50 == 0:
                time.sleep(0.001)
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    time.sleep(0.05)  # consumer stalls at the start
    while not (done.is_set() and ring.pending == 0):
        consumed.append(ring.consume(max_samples=1000))
        time.sleep(0.0005)
    t.join()
    total = sum(len(d) for _, d in consumed)
    for start, data in consumed:
        np.testing.assert_array_equal(data, ramp(start, len(data)))  # no torn or shifted reads
    starts = [s for s, d in consumed if len(d)]
    assert starts == sorted(starts)
    assert total + ring.dropped_samples == block * blocks
    assert ring.dropped_samples > 0  # the stall did overflow a 0.25 s buffer


def test_from_seconds_and_validation():
    ring = RingBuffer.from_seconds(1.5, sample_rate=16000)
    assert ring.capacity == 24000
    with pytest.raises(ValueError):
        RingBuffer(0)
    with pytest.raises(ValueError):
        RingBuffer(10, dtype=np.float64)
