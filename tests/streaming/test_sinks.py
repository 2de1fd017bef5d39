import io
import json
import re

from burble.streaming.events import StreamEvent, Word
from burble.streaming.sinks import DIM, RESET, JsonLinesSink, SrtSink, TerminalSink, format_srt_time


def w(text: str, start: float, end: float) -> Word:
    return Word(text, start, end)


def ev(type_: str, words: list[Word], seg: int = 0) -> StreamEvent:
    return StreamEvent.from_words(type_, words, segment_id=seg)


STREAM = [
    ev("partial", [w(" Hello", 0.0, 0.4)]),
    ev("partial", [w(" Hello", 0.0, 0.4), w(" world", 0.5, 0.9)]),
    ev("final", [w(" Hello", 0.0, 0.4)]),
    ev("partial", [w(" world.", 0.5, 0.9)]),
    ev("final", [w(" world.", 0.5, 0.9)]),
    ev("endpoint", [w(" Hello", 0.0, 0.4), w(" world.", 0.5, 0.9)]),
    ev("final", [w(" How", 2.0, 2.2), w(" are", 2.2, 2.4), w(" you?", 2.4, 2.8)], seg=1),
    ev("endpoint", [w(" How", 2.0, 2.2), w(" are", 2.2, 2.4), w(" you?", 2.4, 2.8)], seg=1),
]


def screen(raw: str) -> list[str]:
    """What a terminal would show: apply carriage returns / line clears, drop colour codes."""
    lines, cur = [], ""
    for token in re.split(r"(\r\x1b\[2K|\n)", raw):
        if token == "\r\x1b[2K":
            cur = ""
        elif token == "\n":
            lines.append(cur)
            cur = ""
        else:
            cur += re.sub(r"\x1b\[[0-9]*m", "", token)
    return lines + ([cur] if cur else [])


def test_terminal_dims_partials_and_rewrites_the_line():
    out = io.StringIO()
    sink = TerminalSink(out, ansi=True, width=80)
    for e in STREAM[:2]:
        sink.write(e)
    assert out.getvalue().endswith(DIM + "Hello world" + RESET)  # nothing committed yet: all dim
    for e in STREAM[2:4]:
        sink.write(e)
    assert out.getvalue().endswith("\r\x1b[2KHello" + DIM + " world." + RESET)  # committed normal
    for e in STREAM[4:]:
        sink.write(e)
    sink.close()
    assert screen(out.getvalue()) == ["Hello world.", "How are you?"]


def test_terminal_wraps_long_committed_text():
    out = io.StringIO()
    sink = TerminalSink(out, ansi=True, width=21)
    words = [w(f" word{i}", i, i + 0.5) for i in range(10)]
    for i in range(0, 10, 2):
        sink.write(ev("final", words[i : i + 2]))
        sink.write(ev("partial", [w(" and a long partial tail that is too wide", 20, 21)]))
    sink.write(ev("endpoint", words))
    shown = screen(out.getvalue())
    assert all(len(line) <= 20 for line in shown)
    assert " ".join(shown).split() == [f"word{i}" for i in range(10)]


def test_terminal_without_tty_prints_only_committed_text():
    out = io.StringIO()  # not a TTY: no escape codes, no partials
    sink = TerminalSink(out, show_times=True)
    assert sink.ansi is False
    for e in STREAM:
        sink.write(e)
    sink.close()
    assert out.getvalue() == "[00:00.0] Hello world.\n[00:02.0] How are you?\n"


def test_json_lines(tmp_path):
    path = tmp_path / "events.jsonl"
    sink = JsonLinesSink(path, partials=False)
    for e in STREAM:
        sink.write(e)
    sink.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in rows] == ["final", "final", "endpoint", "final", "endpoint"]
    assert rows[0]["words"] == [{"word": " Hello", "start": 0.0, "end": 0.4}]


def test_srt_cues(tmp_path):
    path = tmp_path / "out.srt"
    sink = SrtSink(path, max_chars=20)
    long_words = [w(f" w{i:02d}", 10 + i * 0.3, 10 + i * 0.3 + 0.25) for i in range(8)]  # 4 chars each
    for e in STREAM + [ev("final", long_words, seg=2)]:
        sink.write(e)
    sink.write(ev("endpoint", []))
    sink.close()
    blocks = path.read_text().strip().split("\n\n")
    cues = [b.split("\n") for b in blocks]
    assert [c[0] for c in cues] == [str(i) for i in range(1, len(cues) + 1)]
    assert cues[0][1:] == ["00:00:00,000 --> 00:00:00,900", "Hello world."]
    assert cues[1][1:] == ["00:00:02,000 --> 00:00:02,800", "How are you?"]
    assert all(len(c[2]) <= 20 for c in cues)
    assert " ".join(c[2] for c in cues[2:]).split() == [f"w{i:02d}" for i in range(8)]
    assert format_srt_time(3725.5) == "01:02:05,500"


def test_srt_close_writes_pending_words(tmp_path):
    path = tmp_path / "out.srt"
    sink = SrtSink(path)
    sink.write(ev("final", [w(" unfinished", 1.0, 1.5)]))
    sink.close()
    sink.close()  # idempotent
    assert "unfinished" in path.read_text()


def test_event_log_lines():
    from burble.streaming.sinks import EventLogSink

    out = io.StringIO()
    sink = EventLogSink(out)
    for e in STREAM:
        sink.write(StreamEvent(**{**e.__dict__, "emitted_at": 3.1}))
    sink.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 5  # partials left out
    assert lines[0] == "emitted    3.10s  final     [   0.00 ->    0.40] Hello"
