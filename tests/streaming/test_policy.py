import pytest

from burble.streaming.events import Word
from burble.streaming.policy import (
    AlignAtt,
    alignatt_stable_words,
    LocalAgreement,
    common_prefix_length,
    ends_sentence,
    find_trim_time,
    normalize_word,
    trailing_loop_start,
    words_before_a_reread,
)


def hyp(text: str, start: float = 0.0, step: float = 0.5) -> list[Word]:
    """Words at fixed times: word i spans [start + i*step, start + (i+1)*step)."""
    return [Word(" " + w, start + i * step, start + (i + 1) * step) for i, w in enumerate(text.split())]


def texts(words: list[Word]) -> list[str]:
    return [w.word.strip() for w in words]


def test_normalize_word():
    assert normalize_word(" Hello,") == "hello"
    assert normalize_word("WORLD!") == "world"
    assert normalize_word(" don't") == "dont"
    assert normalize_word(" «Ça»") == "ça"
    assert normalize_word(" ...") == ""


def test_common_prefix_is_case_and_punctuation_insensitive():
    assert common_prefix_length(hyp("the cat sat"), hyp("The cat, sits")) == 2
    assert common_prefix_length(hyp("a b"), hyp("a b"), hyp("a c")) == 1
    assert common_prefix_length(hyp("x"), []) == 0


def test_local_agreement_2_commits_confirmed_prefix_only():
    la = LocalAgreement(2)
    assert la.insert(hyp("the quick")) == []  # one hypothesis confirms nothing
    assert texts(la.tentative) == ["the", "quick"]
    assert texts(la.insert(hyp("the quick brown fax"))) == ["the", "quick"]
    assert texts(la.tentative) == ["brown", "fax"]
    # The new hypothesis repeats committed words (the window was not trimmed): they are skipped.
    assert texts(la.insert(hyp("the quick brown fox jumps"))) == ["brown"]
    assert texts(la.insert(hyp("The quick brown fox, jumps over"))) == ["fox,", "jumps"]
    assert texts(la.flush()) == ["over"]
    assert la.tentative == []
    assert la.committed_count == 6


def test_committed_words_never_repeat_after_trim():
    la = LocalAgreement(2)
    la.insert(hyp("one two three four"))
    assert texts(la.insert(hyp("one two three four five"))) == ["one", "two", "three", "four"]
    # The recognizer trimmed the window at 1.0 s (after "two"), so the next hypotheses start at
    # "three" with slightly different timings; "three four" must be recognised as committed.
    h1 = [Word(" three", 0.95, 1.45), Word(" four", 1.45, 2.0), Word(" five", 2.0, 2.6)]
    h2 = h1 + [Word(" six", 2.6, 3.0)]
    # Only "five" is new, and the previous hypothesis already said it: committed now.
    assert texts(la.insert(h1)) == ["five"]
    assert la.tentative == []
    assert la.insert(h2) == []
    assert texts(la.tentative) == ["six"]


def test_n_gram_overlap_strips_when_timings_shift_late():
    la = LocalAgreement(2, time_tolerance=0.0)
    la.insert(hyp("alpha beta"))
    la.insert(hyp("alpha beta gamma"))
    assert la.last_committed_end == 1.0
    # Re-decoded committed words appear with timestamps *after* the committed end.
    late = [Word(" Alpha", 1.05, 1.3), Word(" beta", 1.3, 1.6), Word(" gamma", 1.6, 2.0), Word(" delta", 2.0, 2.4)]
    assert la.strip_committed(late)[0].word == " gamma"


def test_repeated_words_far_from_boundary_are_kept():
    la = LocalAgreement(2)
    la.insert(hyp("yes"))
    la.insert(hyp("yes no"))
    far = [Word(" yes", 5.0, 5.4)]
    assert texts(la.strip_committed(far)) == ["yes"]


def test_local_agreement_3_needs_three_votes():
    la = LocalAgreement(3)
    assert la.insert(hyp("a b")) == []
    assert la.insert(hyp("a b c")) == []
    assert texts(la.insert(hyp("a x"))) == ["a"]


def test_reset_forgets_everything():
    la = LocalAgreement(2)
    la.insert(hyp("a b"))
    la.insert(hyp("a b"))
    la.reset()
    assert la.last_committed_end is None and la.committed_count == 0
    assert la.insert(hyp("a b")) == []


def test_ends_sentence():
    assert ends_sentence(Word(" done.", 0, 1))
    assert ends_sentence(Word(' "Really?"', 0, 1))
    assert not ends_sentence(Word(" Mr", 0, 1))
    assert not ends_sentence(Word(" and,", 0, 1))


def test_find_trim_time_prefers_latest_committed_boundary():
    committed = [
        Word(" Hi.", 0.0, 0.4),
        Word(" How", 0.6, 0.8),
        Word(" are", 0.8, 1.0),
        Word(" you?", 1.0, 1.3),
        Word(" I", 1.6, 1.7),
    ]
    assert find_trim_time(committed, window_start=0.0) == 1.3
    assert find_trim_time(committed, window_start=1.3) is None
    # No boundary: only a forced trim cuts, at the last committed word.
    plain = [Word(" so", 2.0, 2.2), Word(" then", 2.2, 2.6)]
    assert find_trim_time(plain, window_start=1.8) is None
    assert find_trim_time(plain, window_start=1.8, force=True) == 2.6
    assert find_trim_time([], window_start=0.0, force=True) is None


def test_a_sentence_mark_of_its_own_trims_where_the_spoken_word_before_it_ends():
    """The alignment stretches a "." decoded as its own word over the pause, up to the next
    word's onset (the 80 s dev file: "raised" ends at 67.64 s, its "." at 68.46 s, where "O'Brien"
    begins); a cut at the mark's end clipped "O'Brien" into "All Brian"."""
    committed = [Word(" are", 67.02, 67.34), Word(" raised", 67.34, 67.64), Word(".", 67.76, 68.46)]
    assert find_trim_time(committed, window_start=63.2) == 67.64
    assert find_trim_time(committed[:2], window_start=63.2) is None  # the mark makes the boundary
    assert find_trim_time([Word(".", 67.76, 68.46)], window_start=67.64, force=True) is None  # nothing spoken to cut after


# -- AlignAtt -------------------------------------------------------------------------------------


def test_alignatt_commits_words_whose_next_token_is_also_read_early():
    # Three words of 1, 2 and 1 tokens: rows 0..3 predict the tokens, row 4 end-of-text.
    counts = [1, 2, 1]
    # Audio received: 100 frames; threshold 10 -> a row is early if its peak is below 90.
    peaks = [10, 30, 50, 95, 99]
    # Word 2 (rows 1-2) is followed by row 3 at frame 95: the model is reading the end for it,
    # so word 2 might still change (" hel" vs " hello"): only word 1 is stable.
    assert alignatt_stable_words(counts, peaks, first_row=0, end_frame=100, frames_before_end=10) == 1
    # Once 20 more frames have arrived, every row is early and all three words are stable.
    assert alignatt_stable_words(counts, peaks, first_row=0, end_frame=120, frames_before_end=10) == 3
    # Threshold 0 with the audio just received: peaks must lie before the last frame.
    assert alignatt_stable_words(counts, peaks, first_row=0, end_frame=99, frames_before_end=0) == 2


def test_alignatt_stops_at_the_first_late_token_even_if_later_ones_look_early():
    # A token that looks at the end stops the decode (SimulStreaming): what follows it is not trusted.
    assert alignatt_stable_words([1, 1, 1], [5, 95, 10, 12], first_row=0, end_frame=100, frames_before_end=10) == 0


def test_alignatt_skips_the_forced_prefix_rows():
    # Two prefix rows (already committed words) look late; they are not the hypothesis's.
    peaks = [99, 99, 20, 30, 40]
    assert alignatt_stable_words([1, 1], peaks, first_row=2, end_frame=100, frames_before_end=10) == 2
    assert alignatt_stable_words([], peaks, first_row=2, end_frame=100, frames_before_end=10) == 0


def test_alignatt_policy_commits_the_stable_words_and_flushes_the_rest():
    policy = AlignAtt()
    words = [Word(" a", 0.0, 0.2), Word(" b", 0.2, 0.4), Word(" c", 0.4, 0.6)]
    assert policy.insert(words, 1) == words[:1]
    assert policy.tentative == words[1:]
    assert policy.insert(words[1:], 0) == []
    assert policy.flush() == words[1:]
    assert policy.tentative == [] and policy.committed_count == 3
    policy.reset()
    assert policy.committed_count == 0


def test_alignatt_does_not_commit_a_guess():
    counts, peaks = [1, 1, 1], [10, 20, 30, 40]
    kwargs = dict(first_row=0, end_frame=100, frames_before_end=10)
    assert alignatt_stable_words(counts, peaks, **kwargs) == 3
    # The second word is a guess: it and everything after it wait ...
    doubtful = dict(word_probabilities=[0.9, 0.2, 0.9], min_probability=0.5, **kwargs)
    assert alignatt_stable_words(counts, peaks, **doubtful) == 1
    assert alignatt_stable_words(counts, peaks, agreed=[False, False, True], **doubtful) == 1
    # ... until the previous hypothesis had it too (a second vote, as LocalAgreement-2 asks).
    assert alignatt_stable_words(counts, peaks, agreed=[False, True, False], **doubtful) == 3


def test_alignatt_keeps_the_hypothesis_last_word_and_its_mark_tentative():
    """"The all of men rushed ." with every row's attention peak well before the end: without
    ``spoken`` all five words are stable (the control); with it, "rushed" and its "." wait for
    the next spoken word, however early the rows after them attend."""
    counts, peaks = [1, 1, 1, 1, 1], [10, 20, 30, 40, 50, 5]
    kwargs = dict(first_row=0, end_frame=100, frames_before_end=10)
    assert alignatt_stable_words(counts, peaks, **kwargs) == 5
    assert alignatt_stable_words(counts, peaks, spoken=[True, True, True, True, False], **kwargs) == 3
    assert alignatt_stable_words(counts, peaks, spoken=[True, False, True, True, True], **kwargs) == 4  # a mark inside goes
    assert alignatt_stable_words(counts[:1], peaks, spoken=[False], **kwargs) == 0


def test_a_word_that_attends_to_committed_audio_again_is_a_reread():
    """Committed words end at frame 300: "differs from" reads on (peaks 310, 330); a repeat of
    the committed sentence ("Printing in ...") peaks at its old audio (frames 5, 20). Its mark
    row (frame 0) is not judged; with no floor (the control) nothing is cut."""
    counts, spoken = [1, 1, 1, 1, 1], [True, True, False, True, True]
    peaks = [310, 330, 0, 5, 20, 40]
    assert words_before_a_reread(counts, peaks, first_row=0, min_frame=250, spoken=spoken) == 3
    assert words_before_a_reread(counts, peaks, first_row=0, min_frame=0, spoken=spoken) == 5
    assert words_before_a_reread(counts[:2], peaks, first_row=0, min_frame=250) == 2
    assert words_before_a_reread([2], [900, 320, 10], first_row=1, min_frame=250) == 0  # a word's second token


# ------------------------------------------------------------------------------- trailing loops
@pytest.mark.parametrize(
    ("tokens", "keep"),
    [
        ([9, 1, 2, 1, 2, 1, 2], 3),  # a 2-token unit three times: keep one
        ([7, 8, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1], 5),  # a partial last copy is part of the loop
        ([9] + [5] * 6, 2),  # "ffffff"
        ([4, 4, 4, 1, 2, 3, 1, 2, 3, 1, 2, 3], 6),  # the earliest periodic start wins
    ],
)
def test_a_trailing_loop_is_cut_to_its_first_copy(tokens, keep):
    assert trailing_loop_start(tokens) == keep


@pytest.mark.parametrize(
    "tokens",
    [
        [],
        [1, 2, 3, 4, 5, 6],
        [9, 5, 5, 5],  # "no no no": too short for a loop
        [1, 2, 1, 2, 9],  # two copies only
        [1, 2, 1, 2, 1, 2, 9],  # a repeat in the middle: speech came after it
    ],
)
def test_speech_is_not_a_loop(tokens):
    assert trailing_loop_start(tokens) is None
