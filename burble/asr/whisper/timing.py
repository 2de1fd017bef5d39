"""Word timestamps from cross-attention: the alignment heads' attention, median-filtered, DTW-aligned.

Some cross-attention heads of Whisper's decoder follow the audio closely ("alignment heads", listed
in each checkpoint's config). Running the decoder once over the window's final text, their
attention over audio frames forms a token x frame cost matrix; dynamic time warping
(``librosa.sequence.dtw``) finds the monotonic path, and each word's start/end are the frames where
the path enters and leaves its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from librosa.sequence import dtw
from scipy.ndimage import median_filter

from burble.asr.frontend import TIME_PER_AUDIO_TOKEN
from burble.asr.options import TranscribeOptions
from burble.asr.prompt import sot_sequence
from burble.asr.results import Word
from burble.asr.tokenizer import WhisperTokenizer
from burble.asr.whisper.attention_record import heads_by_layer
from burble.asr.whisper.model import Whisper, WhisperTextModel
from burble.asr.window import SegmentPiece, clamp_word_durations

MEDIAN_FILTER_WIDTH = 7


@dataclass
class Alignment:
    """Words of a decode with their times, and where each decoder step looked in the audio.

    Attributes:
      words: one :class:`Word` per word, times relative to the window start.
      word_tokens: the text tokens of each word.
      peak_frames: per decoder input row, ``<|notimestamps|>`` through the last text token (the
        rows that predict each text token and then end-of-text; one more than there are text
        tokens), the encoder frame (20 ms) the alignment heads attend to most (standardised over
        tokens and median-filtered, as for DTW). AlignAtt commits by these peaks.
    """

    words: list[Word]
    word_tokens: list[list[int]]
    peak_frames: np.ndarray


def align(
    model: Whisper,
    tokenizer: WhisperTokenizer,
    start_of_transcript: Sequence[int],
    text_tokens: list[int],
    audio_features: torch.Tensor,
    num_frames: int,
    *,
    text_model: Optional[WhisperTextModel] = None,
    scores: Optional[torch.Tensor] = None,
    token_probabilities: Optional[Sequence[float]] = None,
) -> Alignment:
    """Align ``text_tokens`` (no specials) to the first ``num_frames`` mel frames of a window.

    Args:
      start_of_transcript: the decode's start-of-transcript sequence
        (:func:`burble.asr.prompt.sot_sequence`: language and task of that decode).
      text_model: the decoder already bound to ``audio_features`` (reuses its cross-attention K/V).
      scores: the alignment heads' pre-softmax cross-attention scores ``(heads, rows, frames)``
        of the rows of ``start_of_transcript``, ``<|notimestamps|>`` and the text (end-of-text's
        row may follow), if the decode recorded them (:mod:`burble.asr.whisper.attention_record`);
        with them and ``token_probabilities`` no decoder pass runs here.
      token_probabilities: each text token's probability (NaN where unknown, e.g. a forced prefix).

    Returns the words (times relative to the window start), each word's tokens, and each decoder
    row's attention peak (:class:`Alignment`).
    """
    if not text_tokens:
        return Alignment(words=[], word_tokens=[], peak_frames=np.zeros(0, dtype=np.int64))
    if scores is None or token_probabilities is None:
        scores, token_probabilities = _timing_pass(model, tokenizer, start_of_transcript, text_tokens, audio_features, text_model)
    # Rows: <|notimestamps|> (which predicts the first text token) through the last text token
    # (which predicts end-of-text), i.e. one row more than there are text tokens.
    first_row = len(start_of_transcript)
    text_rows = slice(first_row, first_row + len(text_tokens) + 1)
    if scores.shape[1] - text_rows.stop not in (0, 1) or len(token_probabilities) != len(text_tokens):
        raise ValueError(f"scores of {scores.shape[1]} rows and {len(token_probabilities)} probabilities for {len(text_tokens)} tokens")

    # At least one audio frame: a window's last few milliseconds can hold less than one.
    frames = max(1, num_frames // 2)
    weights = scores[:, :, :frames].float().softmax(dim=-1)  # (heads, rows, frames), standardised over rows
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    # A frame that every token attends to equally has std 0; without the floor it turns into NaN
    # and DTW fails (seen on a sampled fallback decode of a 0.08 s last window).
    # The median filter and DTW run on the CPU (scipy, librosa): copy off the device first.
    weights = ((weights - mean) / std.clamp_min(1e-12)).cpu().numpy()
    weights = median_filter(weights, size=(1, 1, MEDIAN_FILTER_WIDTH), mode="nearest")
    matrix = weights.mean(axis=0)[text_rows]
    _, path = dtw(C=-matrix.astype(np.float64), backtrack=True)
    path = path[::-1]
    text_indices, time_indices = path[:, 0], path[:, 1]
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] * TIME_PER_AUDIO_TOKEN  # one entry per row

    words, word_tokens = tokenizer.split_to_word_tokens(text_tokens)
    boundaries = np.concatenate([[0], np.cumsum([len(t) for t in word_tokens])])
    result: list[Word] = []
    for i, word in enumerate(words):
        first, last = int(boundaries[i]), int(boundaries[i + 1])
        start, end = float(jump_times[first]), float(jump_times[last])
        probability = float(np.mean(token_probabilities[first:last]))
        result.append(Word(word=word, start=start, end=max(start, end), probability=probability))
    return Alignment(words=result, word_tokens=word_tokens, peak_frames=matrix.argmax(axis=1))


def _timing_pass(
    model: Whisper,
    tokenizer: WhisperTokenizer,
    start_of_transcript: Sequence[int],
    text_tokens: list[int],
    audio_features: torch.Tensor,
    text_model: Optional[WhisperTextModel],
) -> tuple[torch.Tensor, list[float]]:
    """One decoder pass over start-of-transcript + text + end-of-text: the alignment heads' scores
    of every row, and each text token's probability."""
    start_sequence = list(start_of_transcript) + [tokenizer.no_timestamps]
    tokens = torch.tensor([start_sequence + text_tokens + [tokenizer.eot]], device=model.device)
    if text_model is None:
        text_model = WhisperTextModel(model, audio_features)
    cache = text_model.new_cache(1, tokens.shape[1])
    with torch.inference_mode():
        logits, scores = model.decoder(tokens, cache, capture=heads_by_layer(model.alignment_heads))
    probs = torch.softmax(logits[0, len(start_sequence) - 1 : -1, : tokenizer.eot], dim=-1)
    token_probs = probs[torch.arange(len(text_tokens), device=probs.device), torch.tensor(text_tokens, device=probs.device)].tolist()
    return torch.cat([s[0] for s in scores], dim=0), token_probs


def _merge_punctuations(words: list[Word], prepend: str, append: str) -> list[Word]:
    """Attach leading/trailing punctuation "words" to their neighbours (so times cover real words)."""
    merged: list[Word] = []
    for word in words:
        stripped = word.word.strip()
        if merged and stripped and stripped in append and not word.word.startswith(" "):
            merged[-1].word += word.word
            continue
        merged.append(Word(word.word, word.start, word.end, word.probability))
    out: list[Word] = []
    carry = ""
    for word in merged:
        if word.word.strip() and word.word.strip() in prepend:
            carry += word.word
            continue
        if carry:
            word.word = carry + word.word.lstrip() if word.word.startswith(" ") and carry.startswith(" ") else carry + word.word
            carry = ""
        out.append(word)
    return out


def add_word_timestamps(
    model: Whisper,
    tokenizer: WhisperTokenizer,
    pieces: list[SegmentPiece],
    audio_features: torch.Tensor,
    *,
    num_frames: int,
    time_offset: float,
    options: TranscribeOptions,
    last_speech_timestamp: float,
    text_model: Optional[WhisperTextModel] = None,
) -> float:
    """Fill ``piece.words`` for the segments of one window; return the last word end.

    Args:
      pieces: the window's segments.
      num_frames: mel frames of real audio in the window.
      time_offset: the window's start time in seconds.
      options: the window's options (its start-of-transcript sequence, punctuation merging).
    """
    eot = tokenizer.eot
    text_tokens = [t for piece in pieces for t in piece.tokens if t < eot]
    aligned = align(
        model, tokenizer, sot_sequence(tokenizer, options), text_tokens, audio_features, num_frames, text_model=text_model
    ).words
    words = clamp_word_durations(aligned, keep="end")
    word_index = 0
    for piece in pieces:
        count = len(tokenizer.split_to_word_tokens([t for t in piece.tokens if t < eot])[0])
        piece_words = [
            Word(word.word, round(time_offset + word.start, 3), round(time_offset + word.end, 3), round(word.probability, 4))
            for word in words[word_index : word_index + count]
        ]
        word_index += count
        piece_words = _merge_punctuations(piece_words, options.prepend_punctuations, options.append_punctuations)
        if piece_words:
            # Segment bounds follow the words (timestamp tokens are coarser).
            piece.start, piece.end = piece_words[0].start, max(piece_words[-1].end, piece_words[0].start)
            last_speech_timestamp = piece_words[-1].end
        piece.words = piece_words
    return last_speech_timestamp
