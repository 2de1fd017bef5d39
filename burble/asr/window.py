"""The window policy: what a decoded 30 s window means, shared by offline, batch and streaming.

A Whisper window is decoded by :mod:`burble.asr.search`; everything decided *about* the result
lives here, once, so long-form (:mod:`burble.asr.transcribe`), batched
(:mod:`burble.batch.batched`) and streaming (:mod:`burble.streaming.recognizer`) decoding agree:

* :class:`WindowResult`, the scores of one decoded window;
* the no-speech rule (:func:`is_silence`) and the temperature fallback
  (:func:`needs_fallback`, :func:`decode_with_fallback`), as openai-whisper and faster-whisper
  apply them, so tokens stay identical to those peers;
* cutting a window into segments at timestamp tokens (:func:`split_by_timestamps`) and turning the
  pieces into :class:`~burble.asr.results.Segment` records (:func:`assemble_segments`);
* the word-duration clamp for DTW word times (:func:`clamp_word_durations`).

This module is pure logic: no model, no audio, no clock.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional, Sequence

import numpy as np

from burble.asr.frontend import FRAMES_PER_SECOND, INPUT_STRIDE
from burble.asr.options import TranscribeOptions
from burble.asr.results import Segment, Word
from burble.asr.tokenizer import TIME_PRECISION, WhisperTokenizer
from burble.asr.whisper.attention_record import CrossAttentionRecord
from burble.asr.whisper.model import WhisperTextModel

# A word is never clamped below this many seconds. DTW stretches a word over an adjacent pause, so
# words longer than twice the median word are cut; in fast speech the median word is ~0.2 s, and
# twice that would also cut ordinary three-syllable words, which last up to ~0.7 s.
MIN_WORD_DURATION_LIMIT = 0.7


def gzip_compression_ratio(text: str) -> float:
    """Bytes of ``text`` over bytes of its zlib compression: high for repetitive (looping) text."""
    data = text.encode("utf-8")
    return len(data) / max(1, len(zlib.compress(data)))


class WindowResult:
    """The best hypothesis of one decoded window and its scores.

    The compression ratio needs the window's text, which streaming never reads: it is computed on
    first use from ``text_of`` (or given, e.g. by tests).

    Args:
      tokens: text and timestamp tokens (end-of-text excluded).
      avg_logprob: the reference's average log-probability (end-of-text counted).
      no_speech_prob: probability of ``<|nospeech|>`` after the start-of-transcript token.
      temperature: the temperature the window was decoded at.
      compression_ratio: the text's gzip ratio, when already known.
      text_of: decodes ``tokens`` to text (for the compression ratio).
      text_model: the decoder bound to this window's audio (its cross-attention K/V are computed):
        word alignment reuses it instead of projecting the audio again.
      token_logprobs: each of ``tokens``' log-probability under the decode's processed logits
        (end-of-text's last, if it was decoded), when the decode knows them.
      record: the alignment heads' cross-attention scores of the decode's passes, when asked for
        (word timing without a pass of its own).
    """

    __slots__ = ("tokens", "avg_logprob", "no_speech_prob", "temperature", "text_model", "token_logprobs", "record", "_compression_ratio", "_text_of")

    def __init__(
        self,
        tokens: list[int],
        avg_logprob: float,
        no_speech_prob: float,
        temperature: float,
        compression_ratio: Optional[float] = None,
        *,
        text_of: Optional[Callable[[list[int]], str]] = None,
        text_model: Optional[WhisperTextModel] = None,
        token_logprobs: Optional[list[float]] = None,
    ) -> None:
        if compression_ratio is None and text_of is None:
            raise ValueError("give the compression ratio or a way to decode the text")
        self.tokens = tokens
        self.avg_logprob = avg_logprob
        self.no_speech_prob = no_speech_prob
        self.temperature = temperature
        self.text_model = text_model
        self.token_logprobs = token_logprobs
        self.record: Optional[CrossAttentionRecord] = None
        self._compression_ratio = compression_ratio
        self._text_of = text_of

    @property
    def compression_ratio(self) -> float:
        if self._compression_ratio is None:
            assert self._text_of is not None
            self._compression_ratio = gzip_compression_ratio(self._text_of(self.tokens).strip())
        return self._compression_ratio

    def __repr__(self) -> str:
        return (
            f"WindowResult(tokens={self.tokens!r}, avg_logprob={self.avg_logprob:.4f}, "
            f"no_speech_prob={self.no_speech_prob:.4f}, temperature={self.temperature})"
        )


# -- no speech and fallback ----------------------------------------------------------------------


def is_silence(window: WindowResult, options: TranscribeOptions) -> bool:
    """Whether a window is silence: ``<|nospeech|>`` is likely and the text is not confident.

    The comparisons are openai-whisper's and faster-whisper's skip rule (no-speech probability
    ``>`` its threshold, average log-probability ``<=`` its threshold), so windows are skipped
    exactly where those peers skip them. Without a log-probability threshold the no-speech
    probability alone decides.
    """
    if options.no_speech_threshold is None or window.no_speech_prob <= options.no_speech_threshold:
        return False
    return options.log_prob_threshold is None or window.avg_logprob <= options.log_prob_threshold


def needs_fallback(window: WindowResult, options: TranscribeOptions) -> bool:
    """Whether a window fails the quality checks and should be decoded at the next temperature."""
    failed = False
    if options.compression_ratio_threshold is not None and window.compression_ratio > options.compression_ratio_threshold:
        failed = True  # too repetitive
    if options.log_prob_threshold is not None and window.avg_logprob < options.log_prob_threshold:
        failed = True  # too improbable
    # Silence: a retry would only hallucinate. As in the peers, this needs a failed log-probability
    # check, so a window is never called silent here on its no-speech probability alone.
    if failed and options.log_prob_threshold is not None and is_silence(window, options):
        failed = False
    return failed


def best_candidate(candidates: Sequence[WindowResult], options: TranscribeOptions) -> WindowResult:
    """After every temperature failed: the most probable window among the not-too-repetitive ones."""
    threshold = options.compression_ratio_threshold
    pool = [w for w in candidates if threshold is None or w.compression_ratio <= threshold] or list(candidates)
    return max(pool, key=lambda w: w.avg_logprob)


# Decodes the windows with the given indices at one temperature, one result per index.
WindowsDecoder = Callable[[float, list[int]], list[WindowResult]]


def decode_with_fallback(decode: WindowsDecoder, count: int, options: TranscribeOptions) -> list[WindowResult]:
    """Decode ``count`` windows, retrying the failing ones together at each next temperature.

    Each window keeps the first result that passes :func:`needs_fallback`; a window that fails at
    every temperature gets :func:`best_candidate` of its results.
    """
    results: list[Optional[WindowResult]] = [None] * count
    candidates: list[list[WindowResult]] = [[] for _ in range(count)]
    pending = list(range(count))
    for temperature in options.temperatures:
        retry = []
        for i, window in zip(pending, decode(temperature, pending)):
            candidates[i].append(window)
            if needs_fallback(window, options):
                retry.append(i)
            else:
                results[i] = window
        pending = retry
        if not pending:
            break
    for i in pending:
        results[i] = best_candidate(candidates[i], options)
    return [r for r in results if r is not None]


# -- segments ------------------------------------------------------------------------------------


@dataclass
class SegmentPiece:
    """A stretch of a window's tokens between timestamps, before it becomes a :class:`Segment`."""

    start: float  # absolute seconds
    end: float
    tokens: list[int]
    words: Optional[list[Word]] = field(default=None)


def split_by_timestamps(
    tokens: list[int],
    *,
    timestamp_begin: int,
    time_offset: float,
    seek: int,
    segment_size: int,
) -> tuple[list[SegmentPiece], int, bool]:
    """Cut a window's tokens into segments at consecutive timestamp pairs; return the next seek.

    Returns:
      ``(pieces, next seek in mel frames, single_timestamp_ending)``.
    """
    single_ending = len(tokens) >= 2 and tokens[-2] < timestamp_begin <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= timestamp_begin and tokens[i - 1] >= timestamp_begin]
    pieces: list[SegmentPiece] = []
    if consecutive:
        slices = consecutive + ([len(tokens)] if single_ending else [])
        last = 0
        for current in slices:
            piece = tokens[last:current]
            pieces.append(
                SegmentPiece(
                    start=time_offset + (piece[0] - timestamp_begin) * TIME_PRECISION,
                    end=time_offset + (piece[-1] - timestamp_begin) * TIME_PRECISION,
                    tokens=piece,
                )
            )
            last = current
        if single_ending:
            next_seek = seek + segment_size  # nothing after the last timestamp
        else:
            next_seek = seek + (tokens[last - 1] - timestamp_begin) * INPUT_STRIDE
    else:
        duration = segment_size / FRAMES_PER_SECOND
        stamps = [t for t in tokens if t >= timestamp_begin]
        if stamps and stamps[-1] != timestamp_begin:
            duration = (stamps[-1] - timestamp_begin) * TIME_PRECISION
        pieces.append(SegmentPiece(start=time_offset, end=time_offset + duration, tokens=tokens))
        next_seek = seek + segment_size
    return pieces, next_seek, single_ending


def assemble_segments(
    pieces: Sequence[SegmentPiece],
    window: WindowResult,
    *,
    seek: int,
    tokenizer: WhisperTokenizer,
    first_id: int,
) -> list[Segment]:
    """The segments of one window's pieces: empty and zero-length pieces are dropped.

    Args:
      seek: the window's start in mel frames.
      first_id: the id of the first segment returned (ids count the kept segments).
    """
    segments: list[Segment] = []
    for piece in pieces:
        text = tokenizer.decode(piece.tokens)
        if piece.start == piece.end or not text.strip():
            continue
        segments.append(
            Segment(
                id=first_id + len(segments),
                seek=seek,
                start=round(piece.start, 3),
                end=round(piece.end, 3),
                text=text,
                tokens=list(piece.tokens),
                temperature=window.temperature,
                avg_logprob=window.avg_logprob,
                compression_ratio=window.compression_ratio,
                no_speech_prob=window.no_speech_prob,
                words=piece.words,
            )
        )
    return segments


# -- word times ----------------------------------------------------------------------------------


def word_duration_limit(words: Sequence[Word]) -> float:
    """The longest a word of this window may last: twice the median, at least the floor."""
    durations = [w.end - w.start for w in words if w.end > w.start]
    if not durations:
        return 0.0  # no timed word: nothing to compare against, so nothing is clamped
    return max(MIN_WORD_DURATION_LIMIT, 2 * float(np.median(durations)))


def clamp_word_durations(words: Sequence[Word], *, keep: Literal["start", "end"]) -> list[Word]:
    """Cut words longer than :func:`word_duration_limit`, keeping the end the caller trusts.

    DTW stretches a word over an adjacent pause. Which side the pause is on differs by use:

    * ``keep="end"`` (offline, batch): a window's words are final, and the stretched words are
      those after a pause (a sentence or window start, as openai-whisper's clamp assumes): their
      start moves later. The end stays, so the seek to the next window does not move.
    * ``keep="start"`` (streaming): the newest word runs on into the not-yet-spoken end of the
      window; an end that late would make the commit policy drop the next real words as already
      committed, so the end is capped.
    """
    limit = word_duration_limit(words)
    clamped: list[Word] = []
    for w in words:
        start, end = w.start, w.end
        if limit and end - start > limit:
            if keep == "end":
                start = end - limit
            else:
                end = start + limit
        clamped.append(Word(word=w.word, start=start, end=end, probability=w.probability))
    return clamped
