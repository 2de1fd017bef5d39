import pytest

from burble.text.numbers import cardinal_words, is_paired_year, ordinal_words, spoken_number, year_words


def test_numbers_are_spelled_like_ljspeech():
    assert year_words(1818) == ["eighteen", "eighteen"]
    assert year_words(1803) == ["eighteen", "oh", "three"]
    assert year_words(1900) == ["nineteen", "hundred"]
    assert cardinal_words(199) == ["one", "hundred", "ninety", "nine"]
    assert cardinal_words(6439) == ["six", "thousand", "four", "hundred", "thirty", "nine"]
    assert ordinal_words(14) == ["fourteenth"]
    assert ordinal_words(20) == ["twentieth"]
    assert ordinal_words(22) == ["twenty", "second"]


def test_cardinals_have_no_and():
    assert cardinal_words(105) == ["one", "hundred", "five"]
    assert cardinal_words(21) == ["twenty", "one"]
    assert cardinal_words(1_000_018) == ["one", "million", "eighteen"]
    assert ordinal_words(101) == ["one", "hundred", "first"]


def test_spoken_numbers_read_years_in_pairs():
    assert spoken_number(1818) == ["eighteen", "eighteen"]
    assert spoken_number(1905) == ["nineteen", "oh", "five"]
    assert spoken_number(1800) == ["eighteen", "hundred"]
    assert spoken_number(2005) == ["two", "thousand", "five"]
    assert spoken_number(2010) == ["twenty", "ten"]
    assert [n for n in (1099, 1100, 1999, 2000, 2009, 2010, 2099, 2100) if is_paired_year(n)] == [1100, 1999, 2010, 2099]


def test_negative_numbers_are_refused():
    for spell in (cardinal_words, ordinal_words, year_words):
        with pytest.raises(ValueError, match="non-negative"):
            spell(-1)
