import time

import pytest

from burble.metrics.rtf import RTFMeter, Stopwatch, rtf


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_rtf():
    assert rtf(3.0, 10.0) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        rtf(1.0, 0.0)
    with pytest.raises(ValueError):
        rtf(-1.0, 1.0)


def test_stopwatch_accumulates_laps():
    clock = FakeClock()
    sw = Stopwatch(clock)
    with sw:
        clock.t += 1.5
    clock.t += 100  # time outside the timed regions does not count
    with sw:
        clock.t += 0.5
    assert sw.elapsed == pytest.approx(2.0) and sw.laps == [1.5, 0.5]
    with pytest.raises(RuntimeError):
        sw.stop()
    sw.start()
    with pytest.raises(RuntimeError):
        sw.start()
    assert sw.running


def test_stopwatch_real_clock():
    sw = Stopwatch()
    with sw:
        time.sleep(0.01)
    assert 0.005 < sw.elapsed < 1.0


def test_meter_weights_by_audio():
    m = RTFMeter()
    assert m.add(1.0, 10.0) == pytest.approx(0.1)
    m.add(3.0, 2.0)
    assert m.rtf == pytest.approx(4.0 / 12.0) and m.items == 2 and m.per_item == [0.1, 1.5]
