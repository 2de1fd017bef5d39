"""Whisper long-form transcription: 30 s windows, seeking by timestamp tokens, temperature fallback.

The loop mirrors the reference behaviour (openai-whisper / faster-whisper) so results match peers:
features of the whole input are computed once; each 30 s window is encoded and decoded by the
shared decoding core (:mod:`burble.decoding`); timestamp tokens split the window into segments and
say where the next window starts; a window whose text is too repetitive (gzip compression ratio) or
too improbable (average log-probability) is decoded again at the next temperature; a window that
is probably silence (no-speech probability) is skipped.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

import torch

from burble.asr.frontend import FRAMES_PER_SECOND, HOP_LENGTH, INPUT_STRIDE, N_FRAMES, SAMPLE_RATE, AudioInput, log_mel_spectrogram, pad_or_trim, to_audio_array
from burble.asr.options import TranscribeOptions
from burble.asr.results import Segment, TranscriptionResult
from burble.asr.tokenizer import TIME_PRECISION
from burble.decoding.stats import SpeculativeStats

if TYPE_CHECKING:
    from burble.asr.pipeline import WhisperASR


@dataclass
class WindowResult:
    tokens: list[int]
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    # The decoder bound to this window's audio (its cross-attention K/V are computed): word
    # alignment reuses it instead of projecting the audio again.
    text_model: Optional[object] = field(default=None, repr=False, compare=False)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / max(1, len(zlib.compress(data)))


def decode_with_fallback(
    asr: "WhisperASR",
    audio_features: torch.Tensor,
    prompt: list[int],
    options: TranscribeOptions,
    stats: SpeculativeStats,
) -> WindowResult:
    """Decode one window, retrying at higher temperatures while quality checks fail."""
    candidates: list[WindowResult] = []
    below_ratio: list[WindowResult] = []
    for temperature in options.temperatures:
        window = asr.decode_window(audio_features, prompt, options, temperature=temperature, stats=stats)
        candidates.append(window)
        needs_fallback = False
        if options.compression_ratio_threshold is not None:
            if window.compression_ratio > options.compression_ratio_threshold:
                needs_fallback = True  # too repetitive
            else:
                below_ratio.append(window)
        if options.log_prob_threshold is not None and window.avg_logprob < options.log_prob_threshold:
            needs_fallback = True  # too improbable
        if (
            options.no_speech_threshold is not None
            and window.no_speech_prob > options.no_speech_threshold
            and options.log_prob_threshold is not None
            and window.avg_logprob < options.log_prob_threshold
        ):
            needs_fallback = False  # silence: a retry would only hallucinate
        if not needs_fallback:
            return window
    pool = below_ratio or candidates
    return max(pool, key=lambda w: w.avg_logprob)


def split_by_timestamps(
    tokens: list[int],
    *,
    timestamp_begin: int,
    time_offset: float,
    seek: int,
    segment_size: int,
) -> tuple[list[dict], int, bool]:
    """Cut a window's tokens into segments at consecutive timestamp pairs; return the next seek.

    Returns:
      ``(segments as dicts with start/end/tokens, next seek in mel frames, single_timestamp_ending)``.
    """
    single_ending = len(tokens) >= 2 and tokens[-2] < timestamp_begin <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= timestamp_begin and tokens[i - 1] >= timestamp_begin]
    segments: list[dict] = []
    if consecutive:
        slices = consecutive + ([len(tokens)] if single_ending else [])
        last = 0
        for current in slices:
            piece = tokens[last:current]
            segments.append(
                dict(
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
        segments.append(dict(start=time_offset, end=time_offset + duration, tokens=tokens))
        next_seek = seek + segment_size
    return segments, next_seek, single_ending


def transcribe(
    asr: "WhisperASR",
    audio: AudioInput,
    options: TranscribeOptions,
    *,
    progress: Optional[Callable[[float], None]] = None,
) -> TranscriptionResult:
    """Transcribe a whole input of any length.

    Args:
      asr: the loaded recogniser.
      audio: a path, or 16 kHz mono samples.
      options: transcription options.
      progress: called with the number of seconds just finished.
    """
    samples = to_audio_array(audio)
    tokenizer = asr.tokenizer
    # Features of the whole input with one hop of padding; windows shorter than 30 s are then
    # zero-padded on the features (as faster-whisper does), so results match it token for token.
    mel = log_mel_spectrogram(samples, n_mels=asr.model.dims.n_mels, padding=HOP_LENGTH)
    content_frames = mel.shape[-1] - 1
    duration = len(samples) / SAMPLE_RATE
    stats = SpeculativeStats()
    encoder_seconds = 0.0
    segments: list[Segment] = []
    all_tokens: list[int] = []
    prompt_reset_since = 0
    if options.initial_prompt:
        all_tokens.extend(tokenizer.encode(" " + options.initial_prompt.strip()))
    seek = 0
    last_speech_timestamp = 0.0
    while seek < content_frames:
        time_offset = seek / FRAMES_PER_SECOND
        segment_size = min(N_FRAMES, content_frames - seek)
        window_mel = pad_or_trim(mel[:, seek : seek + segment_size])
        started = time.perf_counter()
        audio_features = asr.encode(window_mel)
        encoder_seconds += time.perf_counter() - started
        previous = all_tokens[prompt_reset_since:] if options.condition_on_previous_text else []
        prompt = asr.build_prompt(previous, options)
        window = decode_with_fallback(asr, audio_features, prompt, options, stats)

        if options.no_speech_threshold is not None and window.no_speech_prob > options.no_speech_threshold:
            if options.log_prob_threshold is None or window.avg_logprob <= options.log_prob_threshold:
                if progress:
                    progress(segment_size / FRAMES_PER_SECOND)
                seek += segment_size  # silence: skip the window
                continue

        previous_seek = seek
        pieces, seek, single_ending = split_by_timestamps(
            window.tokens,
            timestamp_begin=tokenizer.timestamp_begin,
            time_offset=time_offset,
            seek=seek,
            segment_size=segment_size,
        )
        if options.word_timestamps:
            from burble.asr.whisper.timing import add_word_timestamps

            last_speech_timestamp = add_word_timestamps(
                asr,
                pieces,
                audio_features,
                num_frames=segment_size,
                time_offset=time_offset,
                options=options,
                last_speech_timestamp=last_speech_timestamp,
                text_model=window.text_model,
            )
            if not single_ending:
                ends = [w.end for p in pieces for w in (p.get("words") or [])]
                if ends and ends[-1] > time_offset:
                    seek = round(ends[-1] * FRAMES_PER_SECOND)

        for piece in pieces:
            text_tokens = [t for t in piece["tokens"] if t < tokenizer.eot]
            text = tokenizer.decode(text_tokens)
            if piece["start"] == piece["end"] or not text.strip():
                continue
            all_tokens.extend(text_tokens)
            segments.append(
                Segment(
                    id=len(segments),
                    seek=previous_seek,
                    start=round(piece["start"], 3),
                    end=round(piece["end"], 3),
                    text=text,
                    tokens=piece["tokens"],
                    temperature=window.temperature,
                    avg_logprob=window.avg_logprob,
                    compression_ratio=window.compression_ratio,
                    no_speech_prob=window.no_speech_prob,
                    words=piece.get("words"),
                )
            )
        if not options.condition_on_previous_text or window.temperature > options.prompt_reset_on_temperature:
            prompt_reset_since = len(all_tokens)
        if progress:
            progress((min(content_frames, seek) - previous_seek) / FRAMES_PER_SECOND)
    return TranscriptionResult(
        segments=segments, duration=duration, language=asr.tokenizer.language, stats=stats, encoder_seconds=encoder_seconds
    )
