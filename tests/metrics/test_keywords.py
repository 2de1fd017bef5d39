import math

import pytest

from burble.metrics.keywords import count_occurrences, keyword_counts, keyword_report, keyword_words


def test_normalisation_and_multiword_counting():
    assert keyword_words("Mr. Akerman's NEW-York, café!") == ["mr", "akerman's", "new", "york", "cafe"]
    assert count_occurrences("a b a b a".split(), ["a", "b"]) == 2
    assert count_occurrences("a a a".split(), ["a", "a"]) == 1  # non-overlapping
    with pytest.raises(ValueError):
        count_occurrences(["a"], [])


def test_per_occurrence_recall_and_precision():
    counts = keyword_counts(
        "Newgate prison, Newgate. The Chronicles of Newgate", "new gate prison newgate the chronicles of newgate newgate",
        ["Newgate", "Chronicles of Newgate"],
    )
    assert (counts["Newgate"].reference, counts["Newgate"].hypothesis, counts["Newgate"].hits) == (3, 3, 3)
    assert counts["Chronicles of Newgate"].hits == 1
    report = keyword_report(
        ["Akerman went to Newgate.", "Nothing here.", "Akerman and Akerman"],
        ["Ackerman went to Newgate.", "Akerman here.", "Akerman and Ackerman"],
        ["Akerman", "Newgate"],
    )
    assert report.per_keyword["Akerman"].reference == 3
    assert report.per_keyword["Akerman"].hypothesis == 2
    assert report.per_keyword["Akerman"].hits == 1  # the one in "Nothing here" is a false alarm
    assert report.recall == pytest.approx(2 / 4)
    assert report.precision == pytest.approx(2 / 3)
    assert report.total.f1 == pytest.approx(2 * 2 / 7)


def test_per_utterance_keyword_lists_and_errors():
    report = keyword_report(["Akerman left", "Neild came"], ["Akerman left", "Neil came"], [["Akerman"], ["Neild"]])
    assert report.recall == 0.5 and report.precision == 1.0
    assert math.isnan(keyword_report(["x"], ["y"], ["z"]).recall)
    with pytest.raises(ValueError, match="hypotheses"):
        keyword_report(["a"], [], ["a"])
