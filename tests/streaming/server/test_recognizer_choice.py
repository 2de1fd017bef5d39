"""The server's ``WhisperRecognizerFactory`` builds each session's recognizer through
``RecognizerChoice.build``: cache-aware or re-encoding, with the session's overrides, and its
warm-up runs on either encoder path (real tiny.en)."""

from __future__ import annotations

import pytest

import burble
from burble.streaming.cache_aware import CacheAwareWhisperRecognizer
from burble.streaming.factory import RecognizerChoice
from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer
from burble.streaming.server import WhisperRecognizerFactory
from burble.streaming.server.protocol import SessionConfig


@pytest.fixture(scope="module")
def asr() -> burble.WhisperASR:
    return burble.load_model("tiny.en")


def test_the_default_choice_is_recognizer_choices_default(asr):
    factory = WhisperRecognizerFactory(asr, model_name="tiny.en")
    assert factory.choice == RecognizerChoice()
    expected = CacheAwareWhisperRecognizer if RecognizerChoice().encoder == "cache-aware" else WhisperStreamingRecognizer
    assert type(factory.create(SessionConfig())) is expected


def test_a_cache_aware_factory_makes_cache_aware_sessions_with_their_overrides(asr):
    options = StreamingOptions(beam_size=1, policy="local-agreement")
    factory = WhisperRecognizerFactory(asr, options, choice=RecognizerChoice(encoder="cache-aware", lookahead_seconds=0.24))
    plain = factory.create(SessionConfig())
    assert isinstance(plain, CacheAwareWhisperRecognizer)
    assert plain.cache_options.lookahead_frames == 12 and plain.options == options
    boosted = factory.create(SessionConfig(hotwords=("Fauntleroy",)))
    assert isinstance(boosted, CacheAwareWhisperRecognizer) and boosted.options.hotwords == ("Fauntleroy",)
    assert boosted is not plain and factory.options.hotwords == ()  # per session: the factory's stay


@pytest.mark.parametrize("encoder", ["cache-aware", "re-encode"])
def test_warm_up_runs_on_either_encoder(asr, encoder, monkeypatch):
    factory = WhisperRecognizerFactory(asr, choice=RecognizerChoice(encoder=encoder))
    made = []
    create = factory.create
    monkeypatch.setattr(factory, "create", lambda config: made.append(create(config)) or made[-1])
    factory.warm_up()
    (recognizer,) = made
    assert type(recognizer) is (CacheAwareWhisperRecognizer if encoder == "cache-aware" else WhisperStreamingRecognizer)
    # The warm-up really decoded the clip's speech (so the word-timing DTW ran too).
    assert recognizer.stats.decodes >= 1 and recognizer.stats.audio_seconds > 1.5
    if encoder == "cache-aware":
        # The clip is shorter than the encoder's 3 s first chunk: it is all tail (never cached).
        assert recognizer.stats.tail_frames > 0
