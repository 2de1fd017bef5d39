import pytest

from burble.metrics.pronounce import PronunciationGuesser, _letters

DICT = {
    "wood": "W UH D", "cutter": "K AH T ER", "bed": "B EH D", "stead": "S T EH D",
    "counsel": "K AW N S AH L", "cat": "K AE T", "bus": "B AH S", "dog": "D AO G",
    "want": "W AA N T", "carry": "K AE R IY", "conduce": "K AH N D UW S", "one": "W AH N",
    "eight": "EY T", "eighteen": "EY T IY N", "hundred": "HH AH N D R AH D", "thousand": "TH AW Z AH N D",
    "nineteen": "N AY N T IY N", "ninety": "N AY N T IY",
}


@pytest.fixture
def guesser():
    return PronunciationGuesser(DICT.get)


def test_dictionary_and_inflections(guesser):
    assert guesser.phones("wood") == ["W", "UH", "D"]
    assert guesser.phones("cats") == "K AE T S".split()  # voiceless -> S
    assert guesser.phones("dogs") == "D AO G Z".split()  # voiced -> Z
    assert guesser.phones("buses") == "B AH S IH Z".split()  # sibilant -> IH Z
    assert guesser.phones("cat's") == "K AE T S".split()
    assert guesser.phones("wanted") == "W AA N T IH D".split()
    assert guesser.phones("counselled") == "K AW N S AH L D".split()  # doubled consonant
    assert guesser.phones("conduced") == "K AH N D UW S T".split()  # restored silent e
    assert guesser.phones("carried") == "K AE R IY D".split()  # y -> ied


def test_compounds(guesser):
    assert guesser.phones("woodcutters") == "W UH D K AH T ER Z".split()
    assert guesser.phones("bedsteads") == "B EH D S T EH D Z".split()


def test_digits(guesser):
    assert guesser.phones("1818") == "EY T IY N EY T IY N".split()
    assert guesser.phones("1990s") == "N AY N T IY N N AY N T IY Z".split()


def test_letter_rules():
    assert _letters("ship") == ["SH", "IH", "P"]
    assert _letters("city") == ["S", "IH", "T", "IY"]  # soft c, final y
    assert _letters("make") == ["M", "AE", "K"]  # silent final e
    assert _letters("bell") == ["B", "EH", "L"]  # doubled consonant
    assert _letters("nation") == ["N", "AE", "SH", "AH", "N"]


def test_unknown_word_falls_back_to_rules(guesser):
    assert guesser.phones("zorb") == _letters("zorb")
    with pytest.raises(ValueError):
        guesser.phones("'")
