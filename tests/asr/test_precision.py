"""Half precision on the CPU: dtype names, float32 where rounding matters, and the same words.

bfloat16 is the half precision a CPU runs at speed; a GPU runs float16 (tests/asr/test_cuda.py).
"""

from __future__ import annotations

import pytest
import torch

import burble
from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
from burble.asr.options import TranscribeOptions
from burble.asr.whisper.model import LayerNorm, WhisperTextModel
from burble.audio.io import load_audio
from burble.cli import build_parser
from burble.metrics.wer import wer
from burble.precision import DTYPE_NAMES, dtype_name, torch_dtype
from burble.streaming.factory import RecognizerChoice

JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


@pytest.mark.parametrize("value, expected", [
    (None, torch.float32), ("float32", torch.float32), ("fp16", torch.float16), ("half", torch.float16),
    ("BF16", torch.bfloat16), ("bfloat16", torch.bfloat16), (torch.float16, torch.float16),
])
def test_dtype_names(value, expected):
    assert torch_dtype(value) is expected
    assert dtype_name(expected) in DTYPE_NAMES


@pytest.mark.parametrize("value", ["fp8", "int8", torch.float64])
def test_unknown_dtypes_are_refused_naming_the_choices(value):
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        torch_dtype(value)


def test_an_unknown_dtype_fails_before_the_weights_load(monkeypatch):
    import burble.asr.pipeline as pipeline

    monkeypatch.setattr(pipeline, "load_checkpoint", lambda name: pytest.fail("weights loaded"))
    with pytest.raises(ValueError, match="unknown dtype"):
        burble.load_model("tiny.en", dtype="fp8")


def test_layer_norm_runs_in_float32_for_half_weights():
    torch.manual_seed(0)
    reference = LayerNorm(64)
    torch.nn.init.normal_(reference.weight)
    half = LayerNorm(64)
    half.load_state_dict(reference.state_dict())
    half.half()
    x = torch.randn(3, 64) * 50
    out = half(x.half())
    assert out.dtype == torch.float16
    assert (out.float() - reference(x)).abs().max() < 2e-2


@pytest.fixture(scope="module")
def models():
    return burble.load_model("tiny.en"), burble.load_model("tiny.en", dtype="bfloat16")


def test_bfloat16_model_keeps_float32_logits(models):
    _, bf16 = models
    assert bf16.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in bf16.model.parameters())
    mel = pad_or_trim(log_mel_spectrogram(load_audio("examples/jfk.wav"), n_mels=bf16.model.dims.n_mels))
    features = bf16.encode(mel)  # float32 features are cast at the encoder's input
    assert features.dtype == torch.bfloat16
    text_model = WhisperTextModel(bf16.model, features)
    cache = text_model.new_cache(1, 16)
    assert cache.keys[0].dtype == torch.bfloat16
    logits = text_model.forward(torch.tensor([bf16.build_prompt([], TranscribeOptions())]), cache)
    assert logits.dtype == torch.float32


def test_bfloat16_transcribes_the_same_words_at_the_same_times(models):
    fp32, bf16 = models
    expected = fp32.transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    got = bf16.transcribe("examples/jfk.wav", beam_size=1, word_timestamps=True)
    assert wer(JFK, got.text) < 0.1
    assert wer(expected.text, got.text) < 0.05
    words = [w for s in got.segments for w in s.words]
    reference = [w for s in expected.segments for w in s.words]
    assert [w.word for w in words] == [w.word for w in reference]
    assert max(abs(a.start - b.start) for a, b in zip(words, reference)) <= 0.1


def test_bfloat16_streams(models):
    _, bf16 = models
    audio = load_audio("examples/jfk.wav")
    recognizer = RecognizerChoice().build(bf16)
    events = []
    for i in range(0, len(audio), 16000):
        events += recognizer.accept(audio[i : i + 16000], i)
    events += recognizer.flush()
    finals = "".join(w.word for e in events if e.type == "final" for w in e.words)
    assert wer(JFK, finals) < 0.15


@pytest.mark.parametrize("command, positional", [("transcribe", ["x.wav"]), ("stream", ["x.wav"]), ("listen", []), ("serve", [])])
def test_every_model_command_takes_dtype_and_cuda_graphs(command, positional):
    parser = build_parser()
    args = parser.parse_args([command, *positional, "--dtype", "float16", "--cuda-graphs"])
    assert args.dtype == "float16" and args.cuda_graphs
    assert parser.parse_args([command, *positional]).dtype == "float32"


def test_a_wrong_dtype_on_the_command_line_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["transcribe", "x.wav", "--dtype", "fp8"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'fp8' (choose from 'float32', 'float16', 'bfloat16')" in capsys.readouterr().err
