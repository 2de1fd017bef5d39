import json
import subprocess
import sys

import numpy as np
import pytest

import burble
from burble.asr.results import to_srt, to_vtt
from burble.metrics.wer import wer


@pytest.fixture(scope="module")
def asr():
    return burble.load_model("tiny.en")


def test_transcribe_jfk_with_word_timestamps(asr):
    result = asr.transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    reference = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
    assert wer(reference, result.text) < 0.1
    words = [w for s in result.segments for w in s.words]
    assert len(words) == len(result.text.split())
    starts = [w.start for w in words]
    assert starts == sorted(starts) and all(0 <= w.start <= w.end <= result.duration + 0.5 for w in words)
    # "country" (the last word) is spoken at the end of the 11 s clip, "And" at the start.
    assert words[0].start < 1.5 and words[-1].end > 9.0
    assert all(-5 < s.avg_logprob <= 0 and 0 <= s.no_speech_prob <= 1 for s in result.segments)


def test_beam_search_and_silence(asr):
    result = asr.transcribe("examples/jfk.wav", beam_size=5)
    assert "ask not what your country can do for you" in result.text.lower().replace(",", "")
    silent = asr.transcribe(np.zeros(16000 * 5, np.float32), beam_size=1)
    assert silent.text == ""  # no hallucinated text on silence


def test_srt_and_vtt_format(asr):
    result = asr.transcribe("examples/jfk.wav", beam_size=1)
    srt = to_srt(result)
    assert srt.startswith("1\n00:00:00,000 --> 00:00:") and "\n\n2\n" in srt
    assert to_vtt(result).startswith("WEBVTT\n\n00:00.000 --> ")


def test_cli_writes_outputs_and_survives_bad_files(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk")
    proc = subprocess.run(
        [sys.executable, "-m", "burble", "transcribe", str(tmp_path / "missing.wav"), str(bad), "examples/jfk.wav",
         "--beam-size", "1", "-f", "all", "-o", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1  # two inputs failed ...
    errors = [line for line in proc.stderr.splitlines() if line.startswith("burble transcribe: error:")]
    assert len(errors) == 2 and "missing.wav" in errors[0] and "bad.wav" in errors[1]
    data = json.loads((tmp_path / "out" / "jfk.json").read_text())  # ... and the good one completed
    assert "ask not what your country" in data["text"].lower().replace(",", "")
    assert data["segments"] and "words" in data["segments"][0]
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"jfk.txt", "jfk.srt", "jfk.vtt", "jfk.json"}


def test_cli_help_explains():
    proc = subprocess.run([sys.executable, "-m", "burble", "transcribe", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--word-timestamps" in proc.stdout and "--speculative" in proc.stdout
