"""Phonetic post-matching of hotwords: close-sounding runs are replaced, ordinary words are not."""

import pytest

from burble.asr.fusion.phonetic import PhoneticMatcher, PhoneticOptions, espeak_available, similarity, single_token_words

# A fake pronunciation dictionary: the matcher's logic without espeak-ng.
SOUNDS = {
    "mohrenschildt": "m@Ur@nSIlt", "mornscout": "mO@nskaUt", "mornschilt": "mO@nSIlt",
    "wandsworth": "w0ndzw3T", "once": "wVns", "worth": "w3T", "dover": "d@Uv@", "over": "@Uv@",
    "the": "D@", "went": "wEnt", "abroad": "@brOd", "minver": "mInv@", "menver": "mEnv@",
    "morn": "mO@n", "schilt": "SIlt",
}


def fake(words):
    return [SOUNDS.get(w, w) for w in words]


def test_similarity():
    assert similarity("abc", "abc") == 1.0 and similarity("", "abc") == 0.0
    assert similarity("mInv@", "mEnv@") == pytest.approx(0.8)


def test_close_runs_are_replaced_and_punctuation_kept():
    matcher = PhoneticMatcher(["Mohrenschildt", "Minver"], PhoneticOptions(threshold=0.7), phonemizer=fake)
    assert matcher.correct("as Jean de Mornschilt testified.") == "as Jean de Mohrenschildt testified."
    assert matcher.correct("at Menver Place,") == "at Minver Place,"
    # Too far apart: left alone.
    assert matcher.correct("as Jean de Mornscout testified.") == "as Jean de Mornscout testified."
    # A word of a phrase already there is never re-matched.
    assert matcher.correct("Minver, Minver") == "Minver, Minver"


def test_common_words_are_never_replaced():
    """The negative control: without the common-word rule "over" becomes "Dover"."""
    common = {"over", "once", "worth", "the", "went", "abroad"}.__contains__
    loose = PhoneticMatcher(["Dover", "Wandsworth"], PhoneticOptions(threshold=0.7), phonemizer=fake)
    assert loose.correct("crossed over to Calais") == "crossed Dover to Calais"
    guarded = PhoneticMatcher(["Dover", "Wandsworth"], PhoneticOptions(threshold=0.7), phonemizer=fake, common=common)
    assert guarded.correct("crossed over to Calais") == "crossed over to Calais"
    assert guarded.correct("suffered at once worth.") == "suffered at once worth."


def test_options_are_checked():
    with pytest.raises(ValueError):
        PhoneticOptions(threshold=0.0)
    with pytest.raises(ValueError):
        PhoneticOptions(max_words=0)


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed (apt install espeak-ng)")
def test_espeak_pronunciations_match_a_misspelt_name(tokenizer):
    matcher = PhoneticMatcher(["Wandsworth", "Minver"], common=single_token_words(tokenizer))
    assert matcher.correct("at Menver Place") == "at Minver Place"
    assert matcher.correct("she crossed over the river") == "she crossed over the river"


def test_timed_words_keep_their_span_and_the_rest_is_untouched():
    from burble.asr.results import Word
    from burble.streaming.events import Word as StreamWord

    matcher = PhoneticMatcher(["Mohrenschildt", "Minver"], PhoneticOptions(threshold=0.7), phonemizer=fake)
    words = [Word(" at", 0.0, 0.2, 0.9), Word(" Menver", 0.2, 0.6, 0.4), Word(" Place,", 0.6, 1.0, 0.8)]
    fixed = matcher.correct_words(words)
    assert [w.word for w in fixed] == [" at", " Minver", " Place,"]
    assert fixed[1] == Word(" Minver", 0.2, 0.6, 0.4) and fixed[0] is words[0] and fixed[2] is words[2]
    # A two-word run becomes one word spanning both, with the lower probability (streaming's words too).
    stream = [StreamWord(" Morn", 1.0, 1.3, 0.7), StreamWord(" schilt.", 1.3, 1.8, 0.5)]
    (merged,) = matcher.correct_words(stream)
    assert merged == StreamWord(" Mohrenschildt.", 1.0, 1.8, 0.5)
    assert matcher.correct(" at Menver Place,") == " at Minver Place,"  # the leading space stays
    assert matcher.correct_words([]) == []


def test_correct_result_fixes_text_and_words_but_not_tokens():
    from burble.asr.fusion.phonetic import correct_result
    from burble.asr.results import Segment, TranscriptionResult, Word

    segment = Segment(0, 0, 0.0, 1.0, " at Menver Place.", [1, 2, 3], 0.0, -0.1, 1.0, 0.0,
                      words=[Word(" at", 0.0, 0.2, 0.9), Word(" Menver", 0.2, 0.6, 0.4), Word(" Place.", 0.6, 1.0, 0.8)])
    bare = Segment(1, 0, 1.0, 2.0, " Menver again", [4], 0.0, -0.1, 1.0, 0.0)
    result = TranscriptionResult([segment, bare], duration=2.0)
    matcher = PhoneticMatcher(["Minver"], PhoneticOptions(threshold=0.7), phonemizer=fake)
    fixed = correct_result(result, matcher)
    assert fixed.text == "at Minver Place. Minver again"
    assert [w.word for w in fixed.segments[0].words] == [" at", " Minver", " Place."]
    assert fixed.segments[0].tokens == [1, 2, 3] and fixed.segments[1].words is None
    assert result.text == "at Menver Place. Menver again"  # the input is not modified


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed (apt install espeak-ng)")
def test_the_config_builds_one_matcher_per_phrase_list(tokenizer):
    from burble.asr.fusion.config import BiasingConfig, phonetic_matcher
    from burble.asr.fusion.phrases import Phrase

    config = BiasingConfig(phrases=(Phrase("Minver"), Phrase("Wandsworth", 6.0)))
    matcher = phonetic_matcher(config, tokenizer)
    assert matcher is not None and matcher.phrases == ["Minver", "Wandsworth"]
    assert phonetic_matcher(BiasingConfig(phrases=(Phrase("Minver"), Phrase("Wandsworth"))), tokenizer) is matcher
    assert phonetic_matcher(BiasingConfig(phrases=config.phrases, phonetic=None), tokenizer) is None
    assert phonetic_matcher(BiasingConfig(), tokenizer) is None
    assert BiasingConfig.from_dict({"hotwords": ["Minver"], "phonetic": False}).phonetic is None
    assert BiasingConfig.from_dict({"hotwords": ["Minver"]}).phonetic == PhoneticOptions()


def test_without_espeak_the_matcher_is_skipped_with_one_warning(tokenizer, monkeypatch, caplog):
    from burble.asr.fusion import config as config_module
    from burble.asr.fusion.config import BiasingConfig, phonetic_matcher
    from burble.asr.fusion.phrases import Phrase

    monkeypatch.setattr(config_module, "espeak_available", lambda: False)
    monkeypatch.setattr(config_module, "_warned_no_espeak", False)
    config = BiasingConfig(phrases=(Phrase("Minver"),))
    with caplog.at_level("WARNING"):
        assert phonetic_matcher(config, tokenizer) is None
        assert phonetic_matcher(config, tokenizer) is None
    assert sum("espeak-ng is not installed" in r.message for r in caplog.records) == 1


def test_a_capitalised_phrase_written_in_lower_case_gets_its_case_back():
    matcher = PhoneticMatcher(["Minver Place", "kubernetes"], PhoneticOptions(threshold=0.7), phonemizer=fake)
    assert matcher.correct("at minver place, then") == "at Minver Place, then"
    assert matcher.correct("at Minver Place.") == "at Minver Place."
    assert matcher.correct("Kubernetes runs it") == "Kubernetes runs it"  # a lower-case phrase: left alone
    assert matcher.correct("at minver, place") == "at minver, place"  # not across punctuation
