"""Phonetic post-matching of hotwords: close-sounding runs are replaced, ordinary words are not."""

import pytest

from burble.asr.fusion.phonetic import PhoneticMatcher, PhoneticOptions, espeak_available, similarity, single_token_words

# A fake pronunciation dictionary: the matcher's logic without espeak-ng.
SOUNDS = {
    "mohrenschildt": "m@Ur@nSIlt", "mornscout": "mO@nskaUt", "mornschilt": "mO@nSIlt",
    "wandsworth": "w0ndzw3T", "once": "wVns", "worth": "w3T", "dover": "d@Uv@", "over": "@Uv@",
    "the": "D@", "went": "wEnt", "abroad": "@brOd", "minver": "mInv@", "menver": "mEnv@",
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
