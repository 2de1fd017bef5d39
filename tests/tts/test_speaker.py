"""``burble speak --play`` reaches a real output device: PortAudio -> ALSA -> a private PulseAudio
daemon's null sink, whose monitor is recorded and compared with the WAV written in the same run."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from burble.audio.resample import resample
from burble.testing.virtual_mic import VirtualMicrophone, unavailable_reason


def test_play_sends_the_synthesized_audio_to_the_speaker(tiny_voice_path, tmp_path):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    wav = tmp_path / "same.wav"
    with VirtualMicrophone() as vm:
        recording = tmp_path / "monitor.raw"
        with open(recording, "wb") as out:
            recorder = subprocess.Popen(["parec", f"--device={vm.sink}.monitor", "--format=s16le", "--rate=16000",
                                         "--channels=1", "--latency-msec=20"], stdout=out, env=vm.env())
            time.sleep(0.5)
            done = subprocess.run([sys.executable, "-m", "burble", "speak", "Hello from the speaker, one two three.",
                                   "--play", "-o", str(wav), "--voice", str(tiny_voice_path), "--seed", "2"],
                                  env=vm.env(), capture_output=True, text=True, timeout=300)
            time.sleep(0.5)
            recorder.terminate()
            recorder.wait(10)
    assert done.returncode == 0, done.stderr[-2000:]
    played = np.frombuffer(recording.read_bytes(), "<i2").astype(np.float32) / 32768
    written, rate = sf.read(wav, dtype="float32")
    reference = resample(written, rate, 16000)
    assert played.size >= reference.size, (played.size, reference.size)
    # The written audio is in the recording (normalised cross-correlation near 1); the same audio
    # reversed is not (the negative control: a match score that cannot fail proves nothing).
    assert _match(played, reference) > 0.9
    assert _match(played, reference[::-1].copy()) < 0.5


def _match(recording: np.ndarray, audio: np.ndarray) -> float:
    """Best normalised cross-correlation of ``audio`` against any window of ``recording``."""
    corr = np.correlate(recording, audio, mode="valid")
    k = int(np.argmax(np.abs(corr)))
    window = recording[k:k + audio.size]
    return float(abs(corr[k]) / (np.linalg.norm(audio) * np.linalg.norm(window) + 1e-9))
