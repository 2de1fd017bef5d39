"""Where stream events go: the terminal (live captions), JSON lines, SRT subtitles.

A sink has two methods (``Sink``): ``write(event)`` for each event in order and ``close()`` at the
end of the stream. Sinks run on the event loop thread and must be quick (no blocking network
calls: a socket sink should queue).

- ``TerminalSink``: committed text in normal weight, the uncommitted partial dimmed (ANSI), the
  current line rewritten in place; a new line per utterance. Without a terminal (a pipe) it writes
  only committed text, no escape codes.
- ``JsonLinesSink``: ``StreamEvent.to_json()`` per line (``burble stream --json``).
- ``EventLogSink``: one readable line per event with its times (``burble stream``).
- ``SrtSink``: committed words grouped into numbered SRT cues, appended per utterance so the file
  is valid while the stream is still running.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import IO, Optional, Protocol, Union, runtime_checkable

from burble.streaming.events import StreamEvent, Word
from burble.streaming.policy import ends_sentence

DIM = "\x1b[2m"
RESET = "\x1b[0m"
CLEAR_LINE = "\r\x1b[2K"


@runtime_checkable
class Sink(Protocol):
    """Consumer of stream events."""

    def write(self, event: StreamEvent) -> None: ...

    def close(self) -> None: ...


class TerminalSink:
    """Live captions on a terminal.

    Args:
      stream: where to write (default ``sys.stdout``).
      ansi: use escape codes (dim partials, line rewriting); ``None`` detects a TTY.
      width: line width for wrapping; ``None`` asks the terminal.
      show_times: prefix each utterance line with its start time ``[mm:ss.s]``.
    """

    def __init__(
        self,
        stream: Optional[IO[str]] = None,
        *,
        ansi: Optional[bool] = None,
        width: Optional[int] = None,
        show_times: bool = False,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.ansi = ansi if ansi is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self._width = width
        self.show_times = show_times
        self._committed = ""  # committed text on the current (not yet finished) line
        self._partial = ""
        self._line_open = False  # something of the current utterance is on screen
        self._has_text = False  # the line holds committed words (later words keep their space)

    @property
    def width(self) -> int:
        if self._width is not None:
            return self._width
        return shutil.get_terminal_size((100, 24)).columns

    def _prefix(self, event: StreamEvent) -> str:
        if not self.show_times:
            return ""
        minutes, seconds = divmod(max(0.0, event.start), 60.0)
        return f"[{int(minutes):02d}:{seconds:04.1f}] "

    def write(self, event: StreamEvent) -> None:
        if event.type == "endpoint":
            self._end_line()
            self.stream.flush()
            return
        if event.type == "partial" and not self.ansi:
            return  # a pipe gets only text that will not change
        if not self._line_open:
            if not event.text.strip():
                return
            self._committed = self._prefix(event)
            self._has_text = False
            self._line_open = True
            if not self.ansi:
                self.stream.write(self._committed)
        text = event.text if self._has_text else event.text.lstrip()
        if event.type == "final":
            self._committed += text
            self._has_text = self._has_text or bool(text.strip())
            self._partial = ""
            if not self.ansi:
                self.stream.write(text)
        else:
            self._partial = text
        if self.ansi:
            self._redraw()
        self.stream.flush()

    def _end_line(self) -> None:
        if not self._line_open:
            return
        self._partial = ""
        if self.ansi:
            self._redraw()
        self.stream.write("\n")
        self._committed = ""
        self._line_open = False

    def _redraw(self) -> None:
        width = max(10, self.width - 1)
        # Move completed lines of committed text out of the live line (it can only rewrite one row).
        while len(self._committed) > width:
            cut = self._committed.rfind(" ", 0, width + 1)
            if cut <= 0:
                cut = width
            self.stream.write(CLEAR_LINE + self._committed[:cut] + "\n")
            self._committed = self._committed[cut:].lstrip()
        room = width - len(self._committed)
        partial = self._partial
        if len(partial) > room:
            partial = "…" + partial[len(partial) - room + 1 :] if room > 1 else ""
        line = CLEAR_LINE + self._committed
        if partial:
            line += DIM + partial + RESET
        self.stream.write(line)

    def close(self) -> None:
        self._end_line()
        self.stream.flush()


class JsonLinesSink:
    """One JSON object per event and line.

    Args:
      target: a path (opened for writing, closed at the end) or an open text stream.
      partials: include ``partial`` events (False keeps only final and endpoint).
    """

    def __init__(self, target: Union[str, Path, IO[str], None] = None, *, partials: bool = True) -> None:
        if target is None:
            target = sys.stdout
        if isinstance(target, (str, Path)):
            self._file: IO[str] = open(target, "w", encoding="utf-8")
            self._owned = True
        else:
            self._file = target
            self._owned = False
        self.partials = partials

    def write(self, event: StreamEvent) -> None:
        if event.type == "partial" and not self.partials:
            return
        self._file.write(event.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()


class EventLogSink:
    """One human-readable line per event, with its audio span and emission time
    (``burble stream FILE`` without ``--json``)::

        emitted   3.10s  final     [  1.20 ->   2.50] hello world

    Args:
      stream: where to write (default ``sys.stdout``).
      partials: include partial events.
    """

    def __init__(self, stream: Optional[IO[str]] = None, *, partials: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.partials = partials

    def write(self, event: StreamEvent) -> None:
        if event.type == "partial" and not self.partials:
            return
        emitted = f"{event.emitted_at:7.2f}s" if event.emitted_at is not None else "      -"
        self.stream.write(
            f"emitted {emitted}  {event.type:<8s}  [{event.start:7.2f} -> {event.end:7.2f}] {event.text.strip()}\n"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


def format_srt_time(seconds: float) -> str:
    """``HH:MM:SS,mmm`` as SRT wants it."""
    ms = int(round(max(0.0, seconds) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d},{ms:03d}"


class SrtSink:
    """Writes committed words as SRT subtitles.

    Words of ``final`` events are grouped into cues of at most ``max_chars`` characters and
    ``max_seconds`` duration, breaking early after a sentence end; each utterance (``endpoint``)
    closes its cues, which are then appended to the file.

    Args:
      path: the .srt file to write.
      max_chars: longest cue text.
      max_seconds: longest cue duration.
    """

    def __init__(self, path: Union[str, Path], *, max_chars: int = 42, max_seconds: float = 6.0) -> None:
        if max_chars < 1 or max_seconds <= 0:
            raise ValueError("max_chars must be >= 1 and max_seconds > 0")
        self.path = Path(path)
        self.max_chars = max_chars
        self.max_seconds = max_seconds
        self._file = open(self.path, "w", encoding="utf-8")
        self._words: list[Word] = []
        self.cues = 0

    def write(self, event: StreamEvent) -> None:
        if event.type == "final":
            if event.words:
                self._words.extend(event.words)
            elif event.text.strip():
                self._words.append(Word(event.text, event.start, max(event.end, event.start)))
        elif event.type == "endpoint":
            self._write_cues()

    def _write_cues(self) -> None:
        cue: list[Word] = []
        for word in self._words:
            if cue:
                text = "".join(w.word for w in cue + [word]).strip()
                too_long = len(text) > self.max_chars or word.end - cue[0].start > self.max_seconds
                if too_long or ends_sentence(cue[-1]):
                    self._emit(cue)
                    cue = []
            cue.append(word)
        if cue:
            self._emit(cue)
        self._words = []
        self._file.flush()

    def _emit(self, cue: list[Word]) -> None:
        text = "".join(w.word for w in cue).strip()
        if not text:
            return
        self.cues += 1
        start, end = cue[0].start, max(cue[-1].end, cue[0].start + 0.001)
        self._file.write(f"{self.cues}\n{format_srt_time(start)} --> {format_srt_time(end)}\n{text}\n\n")

    def close(self) -> None:
        if self._file.closed:
            return
        self._write_cues()
        self._file.close()
