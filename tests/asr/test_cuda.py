"""Whisper on a CUDA device: word timings and streaming (skipped without CUDA).

Word alignment runs its median filter and DTW on the CPU; the cross-attention weights come from
the device, so they must be copied off it first (a ``.numpy()`` of a CUDA tensor raises). Every
streaming re-decode aligns words, so a stream on CUDA fails without that copy too.
"""

from __future__ import annotations

import pytest
import torch

import burble
from burble.audio.io import load_audio
from burble.metrics.wer import wer
from burble.streaming.recognizer import WhisperStreamingRecognizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


@pytest.fixture(scope="module")
def cuda_asr():
    return burble.load_model("tiny.en", device="cuda")


def test_transcribe_with_word_timestamps_on_cuda(cuda_asr):
    assert cuda_asr.device.type == "cuda"
    result = cuda_asr.transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    assert wer(JFK, result.text) < 0.1
    words = [w for s in result.segments for w in s.words]
    assert len(words) == len(result.text.split())
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert words[0].start < 1.5 and words[-1].end > 9.0
    # The same words and times as on the CPU (fp32 both; DTW picks the same path).
    cpu = burble.load_model("tiny.en").transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    cpu_words = [w for s in cpu.segments for w in s.words]
    assert [w.word for w in words] == [w.word for w in cpu_words]
    assert max(abs(a.start - b.start) + abs(a.end - b.end) for a, b in zip(words, cpu_words)) <= 0.1


def test_streaming_recognizer_on_cuda(cuda_asr):
    audio = load_audio("examples/jfk.wav")
    recognizer = WhisperStreamingRecognizer(cuda_asr)
    events = []
    for i in range(0, len(audio), 16000):
        events += recognizer.accept(audio[i : i + 16000], i)
    events += recognizer.flush()
    finals = [w for e in events if e.type == "final" for w in e.words]
    assert wer(JFK, "".join(w.word for w in finals)) < 0.15
    assert all(0 <= w.start <= w.end <= 11.1 for w in finals)
    assert events[-1].type == "endpoint"
    assert recognizer.stats.decoding.drafted > 0  # the previous hypothesis drafted on the GPU too
