"""Greedy decoding through the int8 logit screen gives the float32 tokens on real speech.

``TranscribeOptions.screen_logits`` (on by default) projects one-row greedy passes through
:mod:`burble.kernels.screened_projection`; this checks, window by window on the dev recordings,
that the tokens are those of the full float32 projection and that the log-probabilities that
drive temperature fallback and the no-speech decision stay within 1e-3.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import burble
from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
from burble.asr.options import TranscribeOptions
from burble.asr.processors import logit_screen, window_processors
from burble.testing.dev_audio import dev_audio_items, require_shared

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,))


@pytest.fixture(scope="module")
def asr():
    return burble.load_model("tiny.en")


def _windows(limit=None):
    require_shared()
    items = [item for item in dev_audio_items() if item.duration_s <= 30.0]
    return items[:limit] if limit else items


def _check(asr, items) -> None:
    prompt = asr.build_prompt([], GREEDY)
    for item in items:
        features = asr.encode(pad_or_trim(log_mel_spectrogram(item.load())))
        exact = asr.decode_window(features, prompt, replace(GREEDY, screen_logits=False))
        screened = asr.decode_window(features, prompt, GREEDY)
        assert exact.text_model.logit_screen is None and screened.text_model.logit_screen is not None
        assert screened.tokens == exact.tokens, item.id
        assert abs(screened.avg_logprob - exact.avg_logprob) < 1e-3, item.id
        assert abs(screened.no_speech_prob - exact.no_speech_prob) < 1e-3, item.id


def test_same_tokens_on_some_dev_clips(asr):
    _check(asr, _windows(limit=5))


@pytest.mark.slow
def test_same_tokens_on_every_dev_clip(asr):
    _check(asr, _windows())


def test_policy_of_whisper_chain(asr):
    whisper = asr.whisper
    prompt = asr.build_prompt([], GREEDY)
    text_model = whisper.text_model(torch.zeros(1, 1500, whisper.model.dims.n_audio_state))
    policy = logit_screen(whisper, text_model, window_processors(whisper, prompt, GREEDY))
    eot = asr.tokenizer.eot
    exact = set(policy.exact.tolist())
    assert set(range(eot, text_model.vocab_size)) <= exact and set(whisper.suppress_ids_begin) <= exact
    blank = whisper.suppress_ids_begin[0]
    assert not policy.free[blank] and not policy.free[eot]
    # The non-speech symbols are always suppressed: neither free nor worth recomputing.
    symbol = next(t for t in whisper.suppress_ids or asr.tokenizer.non_speech_tokens if t < eot)
    assert not policy.free[symbol] and symbol not in exact
    assert policy.free[asr.tokenizer.encode(" hello")[0]]


def test_no_screen_with_a_biasing_processor(asr):
    class AddScore:  # what shallow fusion and phrase boosting do: a score on single tokens
        def apply(self, logits, tokens):
            logits[:, 13] += 5.0

    whisper = asr.whisper
    prompt = asr.build_prompt([], GREEDY)
    text_model = whisper.text_model(torch.zeros(1, 1500, whisper.model.dims.n_audio_state))
    chain = window_processors(whisper, prompt, GREEDY, extra=lambda begin: [AddScore()])
    assert logit_screen(whisper, text_model, chain) is None
