"""Commit policy for re-decoding streaming ASR: LocalAgreement-n, and where to trim the audio window.

A streaming recognizer re-decodes its uncommitted audio window every chunk and gets a new word
hypothesis each time. Words at the end of the window are unstable (the speaker is mid-word, the
model lacks right context). LocalAgreement-n (Machacek et al., 2023, "Turning Whisper into
Real-Time Transcription System") commits the longest prefix on which the last ``n`` consecutive
hypotheses agree, beyond what is already committed; ``n = 2`` is the usual choice.

Hypotheses carry absolute word times. After the recognizer trims committed audio, its window
starts at the trim time, but a new hypothesis may still repeat committed words near the boundary
(the trim point, word timings and the prompt are not exact), so ``insert`` first removes words
that lie before the last committed end and an n-gram overlap with the committed tail.

Words are compared after ``normalize_word``: case-, whitespace- and punctuation-insensitive, so
" Hello," and " hello" agree.

The recognizer can drop committed audio at ``find_trim_time``: the end of the last committed
sentence, which keeps the window (and latency) bounded. ``trailing_loop_start`` and
``words_before_a_reread`` cut what a decode repeats.

This module is pure logic: no audio, no model, no clock.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from typing import Iterable, Optional, Sequence

from burble.streaming.events import Word

SENTENCE_END_CHARS = frozenset(".?!。？！…")


def normalize_word(word: str) -> str:
    """Lower-case, drop punctuation/symbols and whitespace: ``" Hello,"`` -> ``"hello"``."""
    return "".join(
        ch
        for ch in unicodedata.normalize("NFKC", word).casefold()
        if not ch.isspace() and unicodedata.category(ch)[0] not in "PS"
    )


def _keys(words: Iterable[Word]) -> list[str]:
    return [normalize_word(w.word) for w in words]


def common_prefix_length(*hypotheses: Sequence[Word]) -> int:
    """Number of leading words (normalised) all hypotheses share."""
    if not hypotheses:
        return 0
    keys = [_keys(h) for h in hypotheses]
    n = 0
    for column in zip(*keys):
        if any(k != column[0] for k in column[1:]):
            break
        n += 1
    return n


class LocalAgreement:
    """Commit the prefix confirmed by ``n`` consecutive hypotheses.

    Memory is bounded: the policy keeps only the last ``n`` uncommitted tails and the last
    ``max_overlap`` committed words (the caller receives every committed word once, from
    ``insert`` and ``flush``, and keeps what it needs).

    Args:
      n: number of consecutive hypotheses that must agree (2 = LocalAgreement-2).
      max_overlap: longest run of already committed words to look for at the start of a new
        hypothesis (re-decoded words near the trim point).
      time_tolerance: a hypothesis word starting more than this many seconds before the end of
        the last committed word is a re-decode of committed audio and is dropped.
    """

    def __init__(self, n: int = 2, *, max_overlap: int = 5, time_tolerance: float = 0.2) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        if max_overlap < 0:
            raise ValueError("max_overlap must be >= 0")
        self.n = n
        self.max_overlap = max_overlap
        self.time_tolerance = time_tolerance
        self._tails: deque[list[Word]] = deque(maxlen=n)
        self._committed_tail: deque[Word] = deque(maxlen=max(1, max_overlap))
        self.committed_count = 0
        self.last_committed_end: Optional[float] = None

    # ------------------------------------------------------------------------------- accessors
    @property
    def tentative(self) -> list[Word]:
        """The uncommitted tail of the newest hypothesis (what a ``partial`` event shows)."""
        return list(self._tails[-1]) if self._tails else []

    # ------------------------------------------------------------------------------- updating
    def strip_committed(self, hypothesis: Sequence[Word]) -> list[Word]:
        """Remove the part of ``hypothesis`` that re-decodes already committed words."""
        words = list(hypothesis)
        if self.last_committed_end is None:
            return words
        limit = self.last_committed_end - self.time_tolerance
        words = [w for w in words if w.start >= limit]
        if not words or words[0].start > self.last_committed_end + 1.0:
            return words  # far from the boundary: a repeat there is real speech, keep it
        tail = _keys(self._committed_tail)
        head = _keys(words[: self.max_overlap])
        for k in range(min(len(tail), len(head)), 0, -1):
            if tail[-k:] == head[:k]:
                return words[k:]
        return words

    def insert(self, hypothesis: Sequence[Word]) -> list[Word]:
        """Add the newest full hypothesis (absolute times); return the words it commits.

        Args:
          hypothesis: words of the whole current window, oldest first.

        Returns:
          newly committed words (possibly empty), with the newest hypothesis's timings.
        """
        tail = self.strip_committed(hypothesis)
        self._tails.append(tail)
        if len(self._tails) < self.n:
            return []
        k = common_prefix_length(*self._tails)
        return self._commit(k)

    def flush(self) -> list[Word]:
        """Commit the whole tentative tail (endpoint or end of stream) and forget hypotheses."""
        k = len(self._tails[-1]) if self._tails else 0
        words = self._commit(k)
        self._tails.clear()
        return words

    def reset(self) -> None:
        """Forget everything (a new, unrelated stream)."""
        self._tails.clear()
        self._committed_tail.clear()
        self.committed_count = 0
        self.last_committed_end = None

    def _commit(self, k: int) -> list[Word]:
        if k == 0:
            return []
        newest = self._tails[-1]
        words = newest[:k]
        for t in self._tails:
            del t[:k]
        self._committed_tail.extend(words)
        self.committed_count += len(words)
        self.last_committed_end = max(
            words[-1].end, self.last_committed_end if self.last_committed_end is not None else -1.0
        )
        return words


class AlignAtt:
    """Commit the words the decoder has attended past (AlignAtt; Papi et al. 2023, SimulStreaming).

    Each decode continues after the committed words (they are its forced prefix), so a
    hypothesis holds only new words, and the recognizer says how many of them are stable
    (:func:`alignatt_stable_words`). Those are committed at once; the rest is tentative.
    """

    def __init__(self) -> None:
        self._tentative: list[Word] = []
        self.committed_count = 0

    @property
    def tentative(self) -> list[Word]:
        """The newest hypothesis's words after the stable ones (what a ``partial`` event shows)."""
        return list(self._tentative)

    def insert(self, hypothesis: Sequence[Word], stable: int) -> list[Word]:
        """Take the newest hypothesis of new words; commit its first ``stable`` words."""
        words = list(hypothesis)
        self._tentative = words[stable:]
        self.committed_count += len(words[:stable])
        return words[:stable]

    def flush(self) -> list[Word]:
        """Commit the tentative words (endpoint or end of stream)."""
        words, self._tentative = self._tentative, []
        self.committed_count += len(words)
        return words

    def reset(self) -> None:
        """Forget everything (a new, unrelated stream)."""
        self._tentative = []
        self.committed_count = 0


def alignatt_stable_words(
    word_token_counts: Sequence[int],
    peak_frames: Sequence[int],
    *,
    first_row: int,
    end_frame: int,
    frames_before_end: int,
    word_probabilities: Sequence[float] = (),
    min_probability: float = 0.0,
    agreed: Sequence[bool] = (),
    spoken: Sequence[bool] = (),
) -> int:
    """How many leading words AlignAtt may commit.

    Decoding stops at the first token whose attention peak is within ``frames_before_end`` of the
    end of the received audio: the model is reading audio it has not fully heard. A word is
    committed when all its tokens *and the token after it* come before that point, because the
    word's last token alone cannot tell "hel" from "hello".

    Args:
      word_token_counts: tokens per word of the hypothesis, oldest first.
      peak_frames: the attention peak (encoder frame) of each decoder row; row ``first_row + i``
        predicts the hypothesis's ``i``-th token, and the row after its last token predicts what
        follows it (end-of-text).
      first_row: the row of the hypothesis's first token (rows before it are a forced prefix).
      end_frame: encoder frames of audio received.
      frames_before_end: AlignAtt's threshold ``f``.
      word_probabilities: each word's mean token probability (optional).
      min_probability: a word less probable than this is committed only if the previous
        hypothesis had it too (``agreed``), and nothing after it is committed before it: Whisper
        guesses ("What you are" for "What your country", word probability 0.10; "Stuffered" for
        "stuff it"), and attention alone cannot tell a guess from a word. Confident words keep
        AlignAtt's latency; doubtful ones wait for LocalAgreement-2's second vote.
      agreed: per word, whether the previous hypothesis had the same word at the same place.
      spoken: per word, whether it is a word rather than a punctuation mark (optional). Given,
        a word is committed only if a spoken word follows it in the hypothesis: the rows after
        the last one (marks, end of text) attend anywhere, and a trailing "." guesses that the
        sentence ended where the audio does. On the 80 s dev file "The awe of man rushed." was
        committed 20 ms before the audio's end, and the trim after it lost "over him again".
        The last word waits for a speech pause, an endpoint, or the next word.

    Returns:
      the number of stable words.
    """
    if spoken:
        word_token_counts = word_token_counts[: max((i for i, s in enumerate(spoken) if s), default=0)]
    limit = end_frame - frames_before_end
    row = first_row
    stable = 0
    for index, count in enumerate(word_token_counts):
        following = row + count  # the row predicting the token after this word
        if following >= len(peak_frames) or any(peak_frames[r] >= limit for r in range(row, following + 1)):
            break
        doubtful = index < len(word_probabilities) and word_probabilities[index] < min_probability
        if doubtful and not (index < len(agreed) and agreed[index]):
            break
        stable += 1
        row = following
    return stable


def words_before_a_reread(
    word_token_counts: Sequence[int],
    peak_frames: Sequence[int],
    *,
    first_row: int,
    min_frame: int,
    spoken: Sequence[bool] = (),
) -> int:
    """How many leading words of a hypothesis read new audio: the first spoken word one of whose
    tokens' attention peak lies before ``min_frame`` re-reads audio the committed words already
    cover, and it and what follows are dropped.

    After a committed sentence Whisper base sometimes starts the sentence over ("Printing, in the
    only sense with which we are at present concerned." three times for LJ001-0001): the repeat
    attends to the audio it came from, seconds back, so AlignAtt would commit it at once.
    Punctuation rows attend anywhere and are not judged.

    Args:
      word_token_counts: tokens per word of the hypothesis (new words only), oldest first.
      peak_frames: the attention peak (encoder frame) of each decoder row (as in
        :func:`alignatt_stable_words`).
      first_row: the row of the hypothesis's first token.
      min_frame: the earliest frame a new word may attend to (the committed words' end, less
        a tolerance).
      spoken: per word, whether it is a word rather than a mark (default: all are).
    """
    row = first_row
    for index, count in enumerate(word_token_counts):
        judged = index >= len(spoken) or spoken[index]
        if judged and any(peak_frames[r] < min_frame for r in range(row, min(row + count, len(peak_frames)))):
            return index
        row += count
    return len(word_token_counts)


def trailing_loop_start(tokens: Sequence[int], *, min_repeats: int = 3, min_tokens: int = 6, max_period: int = 24) -> Optional[int]:
    """Where a decode's trailing loop starts repeating: keep ``tokens[:index]``; ``None``: no loop.

    Whisper fed a short or oddly ending window can loop to its token cap ("go forward 10 meters
    go forward 10 meters ...", "ffffffff"). A hypothesis *ending* in a unit of ``period`` tokens
    repeated ``min_repeats`` times (and at least ``min_tokens`` tokens, so "no no no" stays) is
    such a loop; the index keeps its first occurrence. A loop in the middle is left alone: speech
    after it says it was not one.

    Args:
      tokens: the decode's text tokens.
      min_repeats: consecutive copies of the unit that make a loop.
      min_tokens: fewest tokens a loop spans (single-token runs need this many).
      max_period: the longest unit looked for, in tokens.
    """
    n = len(tokens)
    best: Optional[int] = None
    for period in range(1, min(max_period, n // min_repeats) + 1):
        start = n - period  # the periodic suffix is tokens[start:], each token equal to the one a period before
        while start > 0 and tokens[start - 1] == tokens[start - 1 + period]:
            start -= 1
        length = n - start
        if length >= max(min_repeats * period, min_tokens):
            keep = start + period
            best = keep if best is None else min(best, keep)
    return best


def ends_sentence(word: Word) -> bool:
    """Whether the word closes a sentence (its text ends with ``.``, ``?``, ``!`` ...)."""
    text = word.word.rstrip().rstrip("\"')]}»”’")
    return bool(text) and text[-1] in SENTENCE_END_CHARS


def find_trim_time(
    committed: Sequence[Word],
    *,
    window_start: float,
    force: bool = False,
) -> Optional[float]:
    """Where the recognizer may cut its audio window: after the last committed sentence.

    Candidates are the ends of committed words that close a sentence; the latest one after
    ``window_start`` wins. A sentence mark decoded as a word of its own ends where the spoken
    word before it does: the alignment stretches the mark over the pause up to the next word's
    onset, and a cut there clipped it ("O'Brien" heard as "All Brian").

    Args:
      committed: committed words of the current window (absolute times), oldest first.
      window_start: audio time (s) where the window currently starts; only later points count.
      force: when no sentence boundary exists, fall back to the end of the last
        committed word (use when the window grows too long, e.g. past ~15-20 s of audio).

    Returns:
      the trim time in seconds, or ``None`` when the window should not be trimmed yet.
    """
    if not committed:
        return None
    eps = 1e-6
    spoken_end, candidates = window_start, []
    for w in committed:
        if normalize_word(w.word):
            spoken_end = w.end
        if ends_sentence(w) and spoken_end > window_start + eps:
            candidates.append(spoken_end)
    if candidates:
        return max(candidates)
    if force and spoken_end > window_start + eps:
        return spoken_end
    return None
