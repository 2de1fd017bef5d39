"""Evaluation metrics: WER/CER, forced alignment, streaming latency (AWED), real-time factor.

Heavy dependencies (jiwer, whisper-normalizer, pocketsphinx) are imported on first use.
"""

from burble.metrics.alignment import AlignedWord, AlignmentError, ForcedAligner, alignment_words, force_align
from burble.metrics.latency import (
    AudioClock,
    EmittedWord,
    LatencySummary,
    WordDelay,
    awed,
    first_partial_latency,
    match_emitted_words,
    pooled_awed,
    words_from_events,
)
from burble.metrics.rtf import RTFMeter, Stopwatch, rtf
from burble.metrics.wer import (
    ErrorCounts,
    cer,
    char_errors,
    corpus_cer,
    corpus_wer,
    corpus_word_errors,
    normalize_text,
    wer,
    word_errors,
)

__all__ = [
    "AlignedWord", "AlignmentError", "AudioClock", "EmittedWord", "ErrorCounts", "ForcedAligner",
    "LatencySummary", "RTFMeter", "Stopwatch", "WordDelay", "alignment_words", "awed", "cer",
    "char_errors", "corpus_cer", "corpus_wer", "corpus_word_errors", "first_partial_latency",
    "force_align", "match_emitted_words", "normalize_text", "pooled_awed", "rtf", "wer", "word_errors",
    "words_from_events",
]
