import pytest

from burble.metrics.wer import (
    ErrorCounts,
    align_word_sequences,
    cer,
    char_errors,
    corpus_cer,
    corpus_wer,
    corpus_word_errors,
    normalize_text,
    wer,
    word_errors,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Mr. Smith doesn't have colour.", "mister smith does not have color"),
        ("twenty-one dollars", "$21"),
        ("one hundred and five", "105"),
        ("Hmm, uh, well", "well"),
        ("It's the THEATRE!", "it is the theater"),
    ],
)
def test_whisper_english_normalizer(text, expected):
    # These are behaviours of OpenAI Whisper's EnglishTextNormalizer (spelling map, number
    # normaliser, filler removal, contractions), not of a plain lower-case/strip-punctuation one.
    assert normalize_text(text) == expected


def test_word_error_counts():
    counts = word_errors("the cat sat on the mat", "oh the cat sit on mat")
    assert (counts.substitutions, counts.deletions, counts.insertions) == (1, 1, 1)
    assert counts.hits == 4 and counts.ref_len == 6
    assert counts.rate == pytest.approx(3 / 6)


def test_normalisation_on_both_sides():
    assert wer("HE HOPED THERE WOULD BE STEW", "He hoped there'd be stew.", normalize=False) > 0
    assert wer("Mister Smith paid twenty dollars.", "Mr. Smith paid $20") == 0.0
    assert wer("hello world", "Hello, World!") == 0.0


def test_empty_sides():
    assert word_errors("", "") == ErrorCounts()
    assert wer("", "") == 0.0
    assert word_errors("", "oh no").insertions == 2 and wer("", "oh no") == float("inf")
    counts = word_errors("two words", "")
    assert counts.deletions == 2 and counts.rate == 1.0


def test_corpus_wer_weights_by_words():
    pairs = [("a b c d e f g h i j", "a b c d e f g h i j"), ("one", "two")]
    # mean of per-utterance rates would be 0.5; corpus WER is 1 error / 11 words
    assert corpus_wer(pairs, normalize=False) == pytest.approx(1 / 11)
    total = corpus_word_errors(pairs, normalize=False)
    assert total == word_errors(*pairs[0], normalize=False) + word_errors(*pairs[1], normalize=False)
    assert total.ref_len == 11


def test_cer():
    assert cer("abcd", "abed", normalize=False) == pytest.approx(0.25)
    counts = char_errors("ab cd", "abcd", normalize=False)
    assert counts.deletions == 1 and counts.ref_len == 5  # the space counts
    assert corpus_cer([("ab", "ab"), ("cd", "")], normalize=False) == pytest.approx(0.5)


def test_align_word_sequences():
    ops = align_word_sequences(["a", "b", "c", "d"], ["a", "x", "c", "e", "f"])
    assert ("equal", 0, 0) in ops and ("substitute", 1, 1) in ops and ("equal", 2, 2) in ops
    assert sum(op == "insert" for op, _, _ in ops) == 1
    assert [r for _, r, _ in ops if r is not None] == [0, 1, 2, 3]
    assert align_word_sequences([], ["x"]) == [("insert", None, 0)]
    assert align_word_sequences(["x"], []) == [("delete", 0, None)]
    with pytest.raises(ValueError):
        align_word_sequences(["two words"], ["x"])


def test_type_error():
    with pytest.raises(TypeError):
        normalize_text(None)
