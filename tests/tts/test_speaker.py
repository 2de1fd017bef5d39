"""``burble speak --play`` reaches a real output device: PortAudio -> ALSA -> a private PulseAudio
daemon's null sink, whose monitor is recorded and compared with the WAV written in the same run."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.signal
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
                                   "--play", "-o", str(wav), "--voice", str(tiny_voice_path), "--seed", "2",
                                   # sampled: the random test voice's greedy output repeats itself, which
                                   # the in-order match below cannot place
                                   "--temperature", "0.5"],
                                  env=vm.env(), capture_output=True, text=True, timeout=300)
            time.sleep(0.5)
            recorder.terminate()
            recorder.wait(10)
    assert done.returncode == 0, done.stderr[-2000:]
    played = np.frombuffer(recording.read_bytes(), "<i2").astype(np.float32) / 32768
    written, rate = sf.read(wav, dtype="float32")
    reference = resample(written, rate, 16000)
    assert np.count_nonzero(played) >= 0.9 * reference.size, (np.count_nonzero(played), reference.size)
    # The written audio is in the recording, piece by piece and in order. Piece by piece because on
    # a busy machine synthesis can fall behind the device and the speaker pauses to refill (see
    # tests/tts/test_playback.py), which shifts everything after the pause. The same audio
    # reversed is not found (the negative control: a match score that cannot fail proves nothing).
    assert _found_in_order(played, reference) > 0.85
    assert _found_in_order(played, reference[::-1].copy()) < 0.3


def _found_in_order(recording: np.ndarray, audio: np.ndarray, *, piece: int = 800) -> float:
    """The fraction of ``audio``'s sounding pieces (``piece`` samples each) that ``recording`` holds
    (normalised cross-correlation > 0.75), each after the one found before it."""
    sounding = np.flatnonzero(recording)
    recording = recording[sounding[0]:sounding[-1] + 1]
    pieces = [audio[i:i + piece] for i in range(0, audio.size - piece + 1, piece)]
    energies = np.array([np.linalg.norm(p) for p in pieces])
    squares = np.concatenate([[0.0], np.cumsum(recording.astype(np.float64) ** 2)])
    window_norms = np.sqrt(np.maximum(squares[piece:] - squares[:-piece], 0.0))
    found, total, last = 0, 0, -1
    for p, energy in zip(pieces, energies):
        if energy < 0.1 * np.median(energies):
            continue  # near-silence matches any quiet stretch: it says nothing
        total += 1
        # Normalised by each window's own energy, or the loudest stretch would win every time; played
        # at the same gain, the piece's window is about as loud as the piece (this also keeps the
        # FFT's rounding noise over digital silence from scoring).
        corr = np.abs(scipy.signal.correlate(recording, p, mode="valid", method="fft"))
        scores = np.where(window_norms > 0.5 * energy, corr / (energy * window_norms + 1e-12), 0.0)
        k = int(np.argmax(scores))
        if scores[k] > 0.75 and k > last:
            found, last = found + 1, k
    return found / max(total, 1)
