"""Progress without a terminal is plain lines, the first result never waits for the scan of the
inputs' headers, and --quiet silences progress but not transcripts."""

import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from burble.batch.inputs import AudioItem
from burble.batch.job import ItemRecord
from burble.batch.progress import AudioTotal, JobProgress

ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _items(n):
    return [AudioItem(id=f"clip{i}", audio=f"clip{i}.wav") for i in range(n)]


def _ok(item_id, seconds):
    return ItemRecord(id=item_id, audio=f"{item_id}.wav", status="ok", duration=seconds)


def test_without_a_terminal_progress_is_plain_lines_at_most_one_per_interval():
    stream, clock = io.StringIO(), FakeClock()
    progress = JobProgress(_items(3), True, stream=stream, interval_seconds=10.0, clock=clock, probe=lambda item: 20.0)
    progress.total._thread.join(5)  # the headers are read (here: at once)
    clock.now += 4
    progress.record(_ok("clip0", 20.0))
    assert stream.getvalue() == ""  # less than the interval since the start
    clock.now += 7
    progress.tick("clip1", 5.0)
    clock.now += 1
    progress.record(_ok("clip1", 20.0))  # 1 s after the last line: none
    clock.now += 10
    progress.record(ItemRecord(id="clip2", audio="clip2.wav", status="failed", error="bad"))
    progress.close()
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) == 3  # at 11 s (a tick), at 22 s (a file), and the closing line
    assert lines[0].startswith("progress: files 1/3 (0 failed)") and "25/60 s audio (42%)" in lines[0]
    assert lines[-1].startswith("progress: files 3/3 (1 failed)") and "40/60 s audio" in lines[-1]


def test_on_a_terminal_progress_is_a_redrawn_bar():  # the control: the line mode is the stream's choice
    stream = Terminal()
    progress = JobProgress(_items(2), True, stream=stream, probe=lambda item: 10.0)
    progress.total._thread.join(5)
    progress.record(_ok("clip0", 10.0))
    progress.close()
    assert "\r" in stream.getvalue() and "files 1/2" in stream.getvalue()


def test_disabled_progress_shows_nothing_and_reads_no_headers():
    stream = io.StringIO()
    progress = JobProgress(_items(2), False, stream=stream, probe=lambda item: pytest.fail("probed"))
    progress.record(_ok("clip0", 3.0))
    progress.close()
    assert stream.getvalue() == ""


def test_the_first_result_does_not_wait_for_the_headers():
    release, probed = threading.Event(), []

    def slow_probe(item):  # a header on a slow disk: each one blocks until released
        assert release.wait(10)
        probed.append(item.id)
        return 30.0

    stream = io.StringIO()
    started = time.monotonic()
    progress = JobProgress(_items(1000), True, stream=stream, interval_seconds=0.0, probe=slow_probe)
    progress.record(_ok("clip7", 12.0))  # a worker finished an item while the scan had read none
    assert time.monotonic() - started < 2.0
    assert "1/1000 files" not in stream.getvalue() and "files 1/1000" in stream.getvalue()
    assert "/~12000 s audio" in stream.getvalue()  # extrapolated from what is known, marked as such
    release.set()
    progress.total._thread.join(10)
    assert progress.total.exact and "clip7" not in probed  # learnt from its record, not read again
    assert progress.total.seconds() == pytest.approx(999 * 30.0 + 12.0)
    progress.close()


def test_audio_total_extrapolates_until_exact():
    total = AudioTotal(_items(4), probe=lambda item: 1.0)
    assert total.seconds() == 0.0 and not total.exact
    total.learn("clip0", 10.0)
    total.learn("clip0", 99.0)  # the first value counts
    assert total.seconds() == 40.0 and not total.exact
    for i in (1, 2, 3):
        total.learn(f"clip{i}", 2.0)
    assert total.exact and total.seconds() == 16.0


def _burble(*args):
    return subprocess.run([sys.executable, "-m", "burble", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_transcribe_without_a_terminal_and_with_quiet(tmp_path):
    common = ["transcribe", "examples/jfk.wav", "--beam-size", "1", "--threads", "1"]
    loud = _burble(*common, "-o", str(tmp_path / "loud"))
    assert loud.returncode == 0, loud.stderr
    assert "ask not what your country" in loud.stdout.lower()
    assert "\r" not in loud.stderr and "progress: files 1/1 (0 failed)" in loud.stderr
    assert "burble transcribe: files: 1 ok" in loud.stderr
    quiet = _burble(*common, "-o", str(tmp_path / "quiet"), "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == loud.stdout  # --quiet keeps the transcripts ...
    assert quiet.stderr == ""  # ... and silences the rest


def test_stream_quiet_keeps_the_captions():
    common = ["stream", "examples/jfk.wav", "--fast", "--threads", "1"]
    loud = _burble(*common)
    assert loud.returncode == 0, loud.stderr
    assert "# audio" in loud.stderr and "country" in loud.stdout
    quiet = _burble(*common, "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "# audio" not in quiet.stderr and "country" in quiet.stdout
