"""Whisper long-form transcription: 30 s windows, seeking by timestamp tokens.

The loop mirrors the reference behaviour (openai-whisper / faster-whisper) so results match peers:
features of the whole input are computed once; each 30 s window is encoded and decoded by the
shared decoding core; timestamp tokens split the window into segments and say where the next
window starts. What a window's result means (temperature fallback, the no-speech rule, segments,
word clamping) is the window policy of :mod:`burble.asr.window`, shared with batch and streaming.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from burble.asr.frontend import FRAMES_PER_SECOND, HOP_LENGTH, N_FRAMES, log_mel_spectrogram, pad_or_trim
from burble.asr.loaded import LoadedWhisper
from burble.asr.options import TranscribeOptions
from burble.asr.processors import ProcessorFactory
from burble.asr.prompt import build_prompt, prompt_language
from burble.asr.results import Segment, TranscriptionResult
from burble.asr.search import decode_window
from burble.asr.whisper.timing import add_word_timestamps
from burble.asr.window import assemble_segments, decode_with_fallback, is_silence, split_by_timestamps
from burble.audio import SAMPLE_RATE
from burble.audio.io import AudioInput, to_audio_array
from burble.audio import SAMPLE_RATE
from burble.audio.io import AudioInput, to_audio_array
from burble.decoding.stats import SpeculativeStats


def transcribe(
    whisper: LoadedWhisper,
    audio: AudioInput,
    options: TranscribeOptions,
    *,
    progress: Optional[Callable[[float], None]] = None,
    extra_processors: Optional[ProcessorFactory] = None,
) -> TranscriptionResult:
    """Transcribe a whole input of any length.

    Args:
      whisper: the loaded model.
      audio: a path, or 16 kHz mono samples.
      options: transcription options.
      progress: called with the number of seconds just finished.
      extra_processors: this call's own processors (shallow fusion, phrase boosting).
    """
    samples = to_audio_array(audio)
    tokenizer = whisper.tokenizer
    n_text_ctx = whisper.model.dims.n_text_ctx
    # Features of the whole input with one hop of padding; windows shorter than 30 s are then
    # zero-padded on the features (as faster-whisper does), so results match it token for token.
    mel = log_mel_spectrogram(samples, n_mels=whisper.model.dims.n_mels, padding=HOP_LENGTH)
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
        audio_features = whisper.encode(window_mel)
        encoder_seconds += time.perf_counter() - started
        previous = all_tokens[prompt_reset_since:] if options.condition_on_previous_text else []
        prompt = build_prompt(tokenizer, n_text_ctx, previous, options)
        (window,) = decode_with_fallback(
            lambda temperature, _: [
                decode_window(
                    whisper, audio_features, prompt, options, temperature=temperature, stats=stats,
                    extra_processors=extra_processors,
                )
            ],
            1,
            options,
        )

        if is_silence(window, options):
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
            last_speech_timestamp = add_word_timestamps(
                whisper.model,
                tokenizer,
                pieces,
                audio_features,
                num_frames=segment_size,
                time_offset=time_offset,
                options=options,
                last_speech_timestamp=last_speech_timestamp,
                text_model=window.text_model,
            )
            if not single_ending:
                ends = [w.end for p in pieces for w in (p.words or [])]
                if ends and ends[-1] > time_offset:
                    seek = round(ends[-1] * FRAMES_PER_SECOND)

        kept = assemble_segments(pieces, window, seek=previous_seek, tokenizer=tokenizer, first_id=len(segments))
        for segment in kept:
            all_tokens.extend(t for t in segment.tokens if t < tokenizer.eot)
        segments.extend(kept)
        if not options.condition_on_previous_text or window.temperature > options.prompt_reset_on_temperature:
            prompt_reset_since = len(all_tokens)
        if progress:
            progress((min(content_frames, seek) - previous_seek) / FRAMES_PER_SECOND)
    return TranscriptionResult(
        segments=segments, duration=duration, language=prompt_language(tokenizer, options), stats=stats,
        encoder_seconds=encoder_seconds,
    )
