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


@pytest.fixture(scope="module")
def cuda_fp16():
    return burble.load_model("tiny.en", device="cuda", dtype="float16")


def test_float16_transcribes_like_float32(cuda_asr, cuda_fp16):
    assert cuda_fp16.dtype == torch.float16
    expected = cuda_asr.transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    got = cuda_fp16.transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    assert wer(JFK, got.text) < 0.1
    assert wer(expected.text, got.text) < 0.05
    assert [w.word for s in got.segments for w in s.words] == [w.word for s in expected.segments for w in s.words]


@pytest.mark.parametrize("speculative", ["off", "mtp"])
def test_cuda_graphs_give_the_eager_tokens(cuda_fp16, speculative):
    graphed = burble.load_model("tiny.en", device="cuda", dtype="float16", static_decode=True)
    audio = load_audio("examples/jfk.wav")
    expected = cuda_fp16.transcribe(audio, beam_size=1, speculative=speculative)
    got = graphed.transcribe(audio, beam_size=1, speculative=speculative)
    assert [s.tokens for s in got.segments] == [s.tokens for s in expected.segments]
    step = graphed.whisper.static_steps.get(graphed.model, 1)
    assert step.use_graph and step._graph is not None  # the steps really were graph replays


def test_batched_windows_on_cuda_match_one_at_a_time(cuda_asr):
    """Rows of different audio in one decode (the engine's batch) on the GPU: each row's tokens
    are the ones it gets alone."""
    from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
    from burble.asr.options import TranscribeOptions

    audio = load_audio("examples/jfk.wav")
    pieces = [audio[: 16000 * 5], audio[16000 * 4 :], audio]
    mels = torch.stack([pad_or_trim(log_mel_spectrogram(p, n_mels=80)) for p in pieces])
    features = cuda_asr.encode(mels)
    options = TranscribeOptions(beam_size=1)
    prompt = cuda_asr.build_prompt([], options)
    batched = cuda_asr.decode_windows(features, prompt, options)
    alone = [cuda_asr.decode_window(features[i : i + 1], prompt, options) for i in range(len(pieces))]
    assert [w.tokens for w in batched] == [w.tokens for w in alone]
