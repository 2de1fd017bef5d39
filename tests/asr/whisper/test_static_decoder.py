"""The static-shape decoder step (CUDA graphs on a GPU) against Whisper's dynamic decoder, on CPU.

On a CPU the static step runs eagerly: the same arithmetic a CUDA graph replays. Its logits must
be the dynamic path's, row by row even when the rows sit at different positions (the engine's
ragged batches), and a transcription through it must give identical tokens with every search.
"""

from __future__ import annotations

import threading

import pytest
import torch

import burble
from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
from burble.asr.options import TranscribeOptions
from burble.asr.whisper.model import WhisperTextModel
from burble.asr.whisper.static_decoder import StaticDecoderStep, StaticSteps, StaticWhisperTextModel
from burble.audio.io import load_audio


@pytest.fixture(scope="module")
def asr():
    return burble.load_model("tiny.en")


@pytest.fixture(scope="module")
def features(asr):
    mel = pad_or_trim(log_mel_spectrogram(load_audio("examples/jfk.wav"), n_mels=asr.model.dims.n_mels))
    return asr.encode(mel)


def _prompt(asr) -> torch.Tensor:
    return torch.tensor([asr.build_prompt([], TranscribeOptions())])


def test_static_step_matches_the_dynamic_forward(asr, features):
    dynamic = WhisperTextModel(asr.model, features)
    static = StaticWhisperTextModel(asr.model, features, StaticSteps())
    d_cache, s_cache = dynamic.new_cache(1, 64), static.new_cache(1, 64)
    token = dynamic.forward(_prompt(asr), d_cache)[:, -1:].argmax(-1)
    static.forward(_prompt(asr), s_cache)
    for _ in range(12):
        expected = dynamic.forward(token, d_cache)
        got = static.forward(token, s_cache)
        assert static._step is not None and static._step.owns(s_cache)  # the static step ran
        assert got.dtype == torch.float32 and got.shape == expected.shape
        assert (got - expected).abs().max() < 1e-3
        assert s_cache.length == d_cache.length
        token = expected[:, -1:].argmax(-1)


def _dynamic_cache_after(asr, features, tokens: list[int]):
    model = WhisperTextModel(asr.model, features)
    cache = model.new_cache(1, 64)
    model.forward(torch.tensor([tokens]), cache)
    return model, cache


@pytest.mark.parametrize("honest_positions", [True, False])
def test_rows_at_different_positions_each_get_their_own_decode(asr, features, honest_positions):
    """Two rows with different histories in one static step: each row's logits are its own
    dynamic decode's. The negative control puts both rows at the longer row's position."""
    prompt = _prompt(asr)[0].tolist()
    histories = [prompt + [843], prompt + [843, 523, 616, 5891]]
    step = StaticDecoderStep(asr.model, 2, graph=False)
    cross = WhisperTextModel(asr.model, features)._cross
    step.bind(cross)
    expected = []
    for row, history in enumerate(histories):
        model, cache = _dynamic_cache_after(asr, features, history[:-1])
        expected.append(model.forward(torch.tensor([[history[-1]]]), cache)[0, -1])
        for layer in range(cache.num_layers):
            step.cache.keys[layer][row, :, : cache.length] = cache.keys[layer][0, :, : cache.length]
            step.cache.values[layer][row, :, : cache.length] = cache.values[layer][0, :, : cache.length]
    lengths = [len(h) - 1 for h in histories]
    positions = torch.tensor(lengths if honest_positions else [max(lengths)] * 2)
    logits = step.step(torch.tensor([[h[-1]] for h in histories]), positions)
    diffs = [float((logits[row, 0] - expected[row]).abs().max()) for row in range(2)]
    if honest_positions:
        assert max(diffs) < 1e-3
    else:
        assert diffs[0] > 0.1 and diffs[1] < 1e-3


@pytest.mark.parametrize("options", [
    dict(beam_size=1),
    dict(beam_size=1, speculative="auto"),
    dict(beam_size=1, speculative="mtp"),
    dict(beam_size=5),  # beam search reorders the cache into new storage: those passes run dynamically
], ids=["greedy", "speculative-auto", "speculative-mtp", "beam-5"])
def test_transcription_through_the_static_step_gives_identical_tokens(asr, options):
    static = burble.load_model("tiny.en", static_decode=True)
    audio = load_audio("examples/jfk.wav")
    expected = asr.transcribe(audio, **options)
    got = static.transcribe(audio, **options)
    assert [s.tokens for s in got.segments] == [s.tokens for s in expected.segments]


def test_cuda_graphs_need_a_cuda_model(asr):
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA model"):
        StaticDecoderStep(asr.model, 1, graph=True)


def test_each_thread_gets_its_own_step(asr):
    steps = StaticSteps()
    mine = steps.get(asr.model, 1, graph=False)
    assert steps.get(asr.model, 1, graph=False) is mine
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(steps.get(asr.model, 1, graph=False)))
    thread.start()
    thread.join()
    assert theirs[0] is not mine
