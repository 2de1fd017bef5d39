import json
import os
import subprocess
import sys

import pytest

from burble.asr.results import Segment, TranscriptionResult
from burble.batch.outputs import (
    check_output, is_complete, output_paths, parse_formats, remove_stale_temporaries, write_outputs,
)


def _result() -> TranscriptionResult:
    segments = [Segment(id=i, seek=0, start=i, end=i + 1.0, text=f" word {i}", tokens=[1, 2], temperature=0.0,
                        avg_logprob=-0.1, compression_ratio=1.0, no_speech_prob=0.0) for i in range(2)]
    return TranscriptionResult(segments=segments, duration=2.0)


def test_parse_formats():
    assert parse_formats("all") == ("txt", "srt", "vtt", "json")
    assert parse_formats("json,txt,json") == ("json", "txt")
    with pytest.raises(ValueError, match="unknown output format 'doc'"):
        parse_formats("doc")


def test_outputs_are_whole_and_in_subfolders(tmp_path):
    paths = write_outputs(_result(), tmp_path, "sub/clip", parse_formats("all"))
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == ["sub/clip.txt", "sub/clip.srt", "sub/clip.vtt", "sub/clip.json"]
    assert all(check_output(p) is None for p in paths)
    assert is_complete(tmp_path, "sub/clip", ("txt", "json"))
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["clip.json", "clip.srt", "clip.txt", "clip.vtt"]


def test_incomplete_outputs_are_detected(tmp_path):
    formats = parse_formats("all")
    paths = dict(zip(formats, write_outputs(_result(), tmp_path, "c", formats)))
    text = paths["json"].read_text()
    paths["json"].write_text(text[: len(text) // 2])  # truncated by something other than burble
    assert check_output(paths["json"]).startswith("invalid JSON")
    assert not is_complete(tmp_path, "c", formats)
    paths["json"].write_text(json.dumps({"text": "x"}))
    assert check_output(paths["json"]) == "JSON without 'text' and 'segments'"
    paths["srt"].write_text("1\n00:00:00,000 --> 00:00:01,000\nword\n\n3\nbroken\n")
    assert check_output(paths["srt"]) == "malformed SRT cue 2"
    paths["vtt"].write_text("")
    assert check_output(paths["vtt"]) == "no WEBVTT header"
    paths["txt"].unlink()
    assert check_output(paths["txt"]) == "missing"
    assert not is_complete(tmp_path, "c", ("txt",))


def test_silence_outputs_count_as_complete(tmp_path):
    formats = parse_formats("all")
    write_outputs(TranscriptionResult(segments=[], duration=3.0), tmp_path, "quiet", formats)
    assert is_complete(tmp_path, "quiet", formats)


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / "a" / f".clip.json.tmp-{dead_pid}"
    live = tmp_path / f".clip.txt.tmp-{os.getpid()}"
    stale.parent.mkdir()
    stale.write_text("{partial")
    live.write_text("being written")
    assert remove_stale_temporaries(tmp_path) == 1
    assert not stale.exists() and live.exists()
    assert output_paths(tmp_path, "x", ["txt"]) == [tmp_path / "x.txt"]
