import pytest

from burble.tts.normalize import TTSInputError, normalize_text, split_sentences


@pytest.mark.parametrize("text, spoken", [
    ("Dr. Smith paid $3.50 on May 3rd, 1999.", "doctor smith paid three dollars and fifty cents on may third, nineteen ninety nine."),
    ("It is 10:30 and 45% agree.", "it is ten thirty and forty five percent agree."),
    ("We met at 7:05 p.m.", "we met at seven oh five p m."),
    ("Flat No. 5 on St. James street costs £1,200.", "flat number five on saint james street costs one thousand two hundred pounds."),
    ("Pi is 3.14 & rising", "pi is three point one four and rising"),
    ("Café “crème” — très bon!", "cafe creme, tres bon!"),
    ("Call 007 now", "call zero zero seven now"),
])
def test_written_forms_become_spoken_words(text, spoken):
    assert normalize_text(text) == spoken


def test_a_sentence_final_abbreviation_is_not_expanded_before_a_lower_case_word():
    assert normalize_text("He lived on the st. corner") == "he lived on the st. corner"


@pytest.mark.parametrize("text", ["", "   ", "。。。", "!!! ???", "———"])
def test_text_with_nothing_to_speak_is_a_clear_error(text):
    with pytest.raises(TTSInputError):
        split_sentences(text)


def test_sentences_are_split_and_long_ones_cut_at_clause_breaks():
    assert split_sentences("One thing. Another thing? Yes!") == ["one thing.", "another thing?", "yes!"]
    long = ", ".join(["the quick brown fox jumps over the lazy dog"] * 20) + "."
    pieces = split_sentences(long, max_chars=100)
    assert all(len(p) <= 100 for p in pieces) and len(pieces) > 5
    assert " ".join(pieces).replace(",", "").split() == long.replace(",", "").replace(".", "").split()[:-1] + ["dog."]


def test_non_latin_letters_are_dropped_but_the_rest_is_spoken():
    assert normalize_text("Hello 世界 world") == "hello world"
