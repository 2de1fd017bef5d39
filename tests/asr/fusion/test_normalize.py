import pytest

from burble.asr.fusion.normalize import LMTextNormalizer, cardinal_words, number_words, ordinal_words, year_words


def test_lowercases_strips_punctuation_and_keeps_inner_apostrophes():
    words = LMTextNormalizer()('Mr. Neild\'s "State of Prisons," the debtors\' side; don\u2019t!')
    assert words == ["mr", "neild's", "state", "of", "prisons", "the", "debtors", "side", "don't"]


def test_numbers_are_spelled_like_ljspeech():
    assert year_words(1818) == ["eighteen", "eighteen"]
    assert year_words(1803) == ["eighteen", "oh", "three"]
    assert year_words(1900) == ["nineteen", "hundred"]
    assert cardinal_words(199) == ["one", "hundred", "ninety", "nine"]
    assert cardinal_words(6439) == ["six", "thousand", "four", "hundred", "thirty", "nine"]
    assert ordinal_words(14) == ["fourteenth"]
    assert ordinal_words(20) == ["twentieth"]
    assert ordinal_words(22) == ["twenty", "second"]
    assert number_words("1,000".replace(",", "")) == ["one", "thousand"]
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
