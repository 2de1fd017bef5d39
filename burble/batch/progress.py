"""Progress of a transcription job on stderr: a live bar on a terminal, plain periodic lines elsewhere.

A log file or a CI console cannot redraw a line, so when the stream is not a terminal progress
goes out as whole lines (at most one per ``interval_seconds``, plus one at the end) instead of
``\\r`` frames. The job's total audio comes from the files' headers, read on a background thread
(:class:`AudioTotal`), so the first transcript never waits for a scan of a large folder; until
every header is read the total is extrapolated from those read so far.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Optional, Sequence, TextIO

from burble.batch.inputs import AudioItem
from burble.batch.job import ItemRecord, audio_duration

Probe = Callable[[AudioItem], float]


class AudioTotal:
    """Audio seconds of a job's items, learnt from file headers (a background thread) and records.

    Args:
      items: the job's items.
      probe: audio seconds of one item (default: its file header).
    """

    def __init__(self, items: Sequence[AudioItem], probe: Probe = audio_duration) -> None:
        self._probe = probe
        self._lock = threading.Lock()
        self._unknown: dict[str, AudioItem] = {item.id: item for item in items}
        self._order = list(self._unknown)
        self._known_seconds = 0.0
        self._known_items = 0
        self._items = len(self._unknown)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe_all, name="burble-audio-total", daemon=True)

    def start(self) -> "AudioTotal":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _probe_all(self) -> None:
        for item_id in self._order:
            if self._stop.is_set():
                return
            with self._lock:
                item = self._unknown.get(item_id)
            if item is not None:  # not yet learnt from a finished item's record
                self.learn(item_id, self._probe(item))

    def learn(self, item_id: str, seconds: float) -> None:
        """Record an item's audio seconds (the first value learnt for an item counts)."""
        with self._lock:
            if self._unknown.pop(item_id, None) is not None:
                self._known_seconds += max(0.0, seconds)
                self._known_items += 1

    @property
    def exact(self) -> bool:
        """Whether every item's length is known (else :meth:`seconds` is an extrapolation)."""
        with self._lock:
            return not self._unknown

    def seconds(self) -> float:
        """The total, extrapolated from the mean of the known items while some are unknown."""
        with self._lock:
            if not self._known_items:
                return 0.0
            return self._known_seconds * self._items / self._known_items


class JobProgress:
    """Audio seconds done of the job's total, files done/failed, speed (audio hours per hour) and ETA.

    Args:
      items: the items to be transcribed.
      enabled: ``False`` shows nothing (and reads no headers).
      stream: where progress goes (default: stderr).
      interval_seconds: without a terminal, the least time between two progress lines.
      clock: monotonic seconds (tests pass a fake one).
      probe: audio seconds of one item, for the total (default: its file header).
    """

    def __init__(
        self,
        items: Sequence[AudioItem],
        enabled: bool,
        *,
        stream: Optional[TextIO] = None,
        interval_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        probe: Probe = audio_duration,
    ) -> None:
        self.enabled = enabled and bool(items)  # nothing to do (all skipped): nothing to show
        self.stream = stream if stream is not None else sys.stderr
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.total_files = len(items)
        self.done = self.failed = 0
        self.audio_done = 0.0  # seconds of the items transcribed
        self.audio_passed = 0.0  # seconds decoded so far, unfinished items included
        self.ticked: dict[str, float] = {}
        self.started = self._last_line = clock()
        self.total = AudioTotal(items, probe)
        self.bar = None
        if not enabled:
            return
        self.total.start()
        if _is_terminal(self.stream):
            from tqdm import tqdm

            self.bar = tqdm(
                total=0, unit="s", file=self.stream, dynamic_ncols=True, smoothing=0.1, mininterval=0.5,
                bar_format="{percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s audio [{elapsed}<{remaining}]{postfix}",
            )
            self._refresh()

    def tick(self, item_id: str, seconds: float) -> None:
        """``seconds`` more of an unfinished item were decoded."""
        self.ticked[item_id] = self.ticked.get(item_id, 0.0) + seconds
        self._advance(seconds)

    def record(self, record: ItemRecord) -> None:
        """An item finished (or failed)."""
        self.total.learn(record.id, record.duration)
        self.done += 1
        self.failed += record.status == "failed"
        if record.status == "ok":
            self.audio_done += record.duration
        self._advance(max(0.0, record.duration - self.ticked.pop(record.id, 0.0)))

    def _advance(self, seconds: float) -> None:
        self.audio_passed += seconds
        if not self.enabled:
            return
        if self.bar is not None:
            self._refresh(redraw=False)
            self.bar.update(seconds)  # redraws at most every mininterval (a million short files)
        elif self.clock() - self._last_line >= self.interval_seconds:
            self._print_line()

    def _speed(self) -> float:
        wall = self.clock() - self.started
        return self.audio_done / wall if wall > 0 else 0.0

    def _files(self) -> str:
        return f"files {self.done}/{self.total_files} ({self.failed} failed), {self._speed():.2f} audio h/h"

    def _refresh(self, redraw: bool = True) -> None:
        assert self.bar is not None
        self.bar.total = max(self.total.seconds(), self.audio_passed)  # the bar's n, once updated
        self.bar.set_postfix_str(self._files(), refresh=False)
        if redraw:
            self.bar.refresh()

    def line(self) -> str:
        """One plain progress line: files, audio done of the total (``~``: still estimated), speed, ETA."""
        total = max(self.total.seconds(), self.audio_passed)
        approx = "" if self.total.exact else "~"
        percent = f" ({100 * self.audio_passed / total:.0f}%)" if total > 0 else ""
        elapsed = self.clock() - self.started
        rate = self.audio_passed / elapsed if elapsed > 0 else 0.0
        eta = _clock_time((total - self.audio_passed) / rate) if rate > 0 else "?"
        return (f"progress: {self._files()}; {self.audio_passed:.0f}/{approx}{total:.0f} s audio{percent}; "
                f"elapsed {_clock_time(elapsed)}, ETA {approx}{eta}")

    def _print_line(self) -> None:
        self._last_line = self.clock()
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        self.total.stop()
        if not self.enabled:
            return
        if self.bar is not None:
            self._refresh()
            self.bar.close()
        else:
            self._print_line()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _clock_time(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
