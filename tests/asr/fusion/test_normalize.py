import pytest

from burble.asr.fusion.normalize import LMTextNormalizer, number_words


def test_lowercases_strips_punctuation_and_keeps_inner_apostrophes():
    words = LMTextNormalizer()('Mr. Neild\'s "State of Prisons," the debtors\' side; don\u2019t!')
    assert words == ["mr", "neild's", "state", "of", "prisons", "the", "debtors", "side", "don't"]


def test_numbers_are_spelled_like_ljspeech():
    assert number_words("1,000".replace(",", "")) == ["one", "thousand"]
    assert number_words("1818") == ["eighteen", "eighteen"]
    assert number_words("14", "th") == ["fourteenth"]
    assert number_words("007") == ["zero", "zero", "seven"]  # leading zeros: digit by digit
    n = LMTextNormalizer()
    assert n("On the 14th June, 1818, 1,000 men") == [
        "on", "the", "fourteenth", "june", "eighteen", "eighteen", "one", "thousand", "men"
    ]


def test_hyphens_split_so_corpus_and_whisper_agree():
    n = LMTextNormalizer()
    assert n("one hundred ninety-nine") == n("one hundred ninety nine")
    assert LMTextNormalizer(hyphens_split=False)("ninety-nine") == ["ninety-nine"]


def test_options_are_explicit():
    assert LMTextNormalizer(lowercase=False)("The Prison") == ["The", "Prison"]
    assert LMTextNormalizer(numbers="keep")("in 1818") == ["in", "1818"]
    assert LMTextNormalizer(numbers="drop")("in 1818") == ["in"]
    assert LMTextNormalizer(unicode_fold=False)("café") == ["café"]
    assert LMTextNormalizer()("café") == ["cafe"]
    with pytest.raises(ValueError, match="numbers"):
        LMTextNormalizer(numbers="roman")


def test_punctuation_only_is_no_word():
    n = LMTextNormalizer()
    assert n(",") == [] and n(" --") == [] and n("") == []
    assert n.line("  Hello,   World. ") == "hello world"
