"""Batched Whisper inference: many 30 s windows per encoder forward and per decoder pass.

Long-form transcription (:mod:`burble.asr.transcribe`) decodes one window at a time because each
window's prompt and start depend on the previous window. Here every window is independent (the
approach of faster-whisper's ``BatchedInferencePipeline``): recordings are cut into chunks of at
most 30 s (:mod:`burble.batch.segment`), all chunks share one prompt (``initial_prompt`` but no
previous text), and ``batch_size`` of them - from one long recording or from many short ones -
are encoded together and decoded as the rows of one call to the shared decoding loop
(:meth:`burble.asr.pipeline.WhisperASR.decode_windows`). Rows finish independently, so a window
gets the same tokens in a batch as alone.

Temperature fallback is per window: the windows that fail the quality checks are decoded again,
together, at the next temperature (:func:`burble.asr.window.decode_with_fallback`, the same
policy as long-form decoding, as are the no-speech rule and segment assembly). With timestamps, a window whose text stops before its chunk
ends (Whisper leaves speech that runs into the window's end for "the next window") gets a
continuation window from its last timestamp, queued into the next batch, as long-form decoding
would seek there; without timestamps (faster-whisper's batched default) that text is lost.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, Iterable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

import numpy as np
import torch

from burble.asr.frontend import CHUNK_LENGTH, HOP_LENGTH, log_mel_spectrogram, pad_or_trim
from burble.audio import SAMPLE_RATE
from burble.asr.options import TranscribeOptions
from burble.asr.pipeline import WhisperASR
from burble.asr.processors import ProcessorFactory
from burble.asr.prompt import prompt_language
from burble.asr.results import Segment, TranscriptionResult
from burble.asr.whisper.timing import add_word_timestamps
from burble.asr.window import (
    SegmentPiece,
    WindowResult,
    assemble_segments,
    decode_with_fallback,
    is_silence,
    split_by_timestamps,
)
from burble.batch.segment import SEGMENTATIONS, Chunk, Segmenter
from burble.decoding.stats import SpeculativeStats

K = TypeVar("K")
# A continuation window needs at least this much audio left in its chunk (shorter tails hold at
# most a word that the model chose not to transcribe).
MIN_CONTINUATION_SAMPLES = SAMPLE_RATE // 2


@dataclass(frozen=True)
class BatchOptions:
    """How windows are formed and batched.

    Attributes:
      batch_size: windows per encoder forward and per decoder pass.
      segmentation: ``auto`` (one window up to 30 s, VAD beyond), ``vad`` or ``fixed``.
      max_chunk_seconds: the longest window.
    """

    batch_size: int = 8
    segmentation: str = "auto"
    max_chunk_seconds: float = CHUNK_LENGTH

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.segmentation not in SEGMENTATIONS:
            raise ValueError(f"segmentation must be one of {SEGMENTATIONS}, not {self.segmentation!r}")
        if not 0 < self.max_chunk_seconds <= CHUNK_LENGTH:
            raise ValueError(f"max_chunk_seconds must be in (0, {CHUNK_LENGTH}]")


def window_features(audio: np.ndarray, chunk: Chunk, n_mels: int = 80) -> torch.Tensor:
    """Log-mel ``(n_mels, 3000)`` of one chunk, computed on the chunk alone and zero-padded.

    For a recording of at most 30 s this equals the first window of long-form transcription.
    """
    mel = log_mel_spectrogram(audio[chunk.start : chunk.end], n_mels=n_mels, padding=HOP_LENGTH)
    return pad_or_trim(mel[:, : mel.shape[-1] - 1])


@dataclass
class _Window:
    job: "_Job"
    chunk: Chunk
    mel: torch.Tensor


@dataclass
class _Decoded:
    """One decoded window of a recording: its segments (times absolute) and its scores."""

    chunk: Chunk
    pieces: list[SegmentPiece]
    result: WindowResult


@dataclass
class _Job(Generic[K]):
    """One recording in flight: its audio (for continuation windows) and decoded pieces."""

    key: K
    audio: Optional[np.ndarray] = None
    duration: float = 0.0
    outstanding: int = 0  # windows queued or being decoded
    windows: list[_Decoded] = field(default_factory=list)
    error: Optional[BaseException] = None
    encoder_seconds: float = 0.0

    @property
    def done(self) -> bool:
        return self.error is not None or self.outstanding == 0


class BatchedTranscriber:
    """Transcribes many recordings with batched windows.

    Args:
      asr: the loaded recogniser.
      options: transcription options (``condition_on_previous_text`` does not apply: windows
        are independent; ``initial_prompt`` prompts every window).
      batch: window formation and batch size.
      extra_processors: the job's biasing (shallow fusion, phrase boosting), for every window.
    """

    def __init__(
        self,
        asr: WhisperASR,
        options: TranscribeOptions = TranscribeOptions(),
        batch: BatchOptions = BatchOptions(),
        *,
        extra_processors: Optional[ProcessorFactory] = None,
    ) -> None:
        self.asr = asr
        self.options = options
        self.batch = batch
        self.extra_processors = extra_processors
        self.segmenter = Segmenter(batch.segmentation, batch.max_chunk_seconds)
        previous = asr.tokenizer.encode(" " + options.initial_prompt.strip()) if options.initial_prompt else []
        self.prompt = asr.build_prompt(previous, options)
        self.stats = SpeculativeStats()

    # -- public API ------------------------------------------------------------------------------

    def transcribe(self, audio: np.ndarray) -> TranscriptionResult:
        """Transcribe one recording (its windows batched together)."""
        ((_, result),) = list(self.transcribe_many([(0, audio)]))
        if isinstance(result, BaseException):
            raise result
        return result

    def transcribe_many(
        self, inputs: Iterable[tuple[K, np.ndarray]], windows: Optional[Mapping[K, Sequence[Chunk]]] = None
    ) -> Iterator[tuple[K, Union[TranscriptionResult, BaseException]]]:
        """Transcribe ``(key, 16 kHz mono samples)`` pairs, yielding ``(key, result)`` in input order.

        Inputs are pulled lazily, only as far as needed to fill the next batch. A window whose
        decoding raises makes its recording's result that exception; the other recordings go on.

        Args:
          inputs: ``(key, samples)`` pairs.
          windows: chunks to decode per key, instead of the segmenter's (e.g. from supervisions).
        """
        queue: deque[_Window] = deque()
        jobs: deque[_Job] = deque()
        size = self.batch.batch_size
        for key, audio in inputs:
            job = _Job(key=key)
            jobs.append(job)
            try:
                job.audio = np.asarray(audio, dtype=np.float32)
                if job.audio.ndim != 1:
                    raise ValueError(f"expected mono audio (1-D), got shape {job.audio.shape}")
                job.duration = len(job.audio) / SAMPLE_RATE
                chunks = windows[key] if windows is not None and key in windows else self.segmenter(job.audio)
                new = [self._window(job, chunk) for chunk in chunks]
                job.outstanding = len(new)
            except Exception as error:  # this recording fails, the others go on
                job.error, new = error, []
            queue.extend(new)
            while len(queue) >= size:
                # Continuation windows go first, so recordings in flight finish soon.
                queue.extendleft(reversed(self._run_batch([queue.popleft() for _ in range(size)])))
            yield from self._finished(jobs)
        while queue:
            queue.extendleft(reversed(self._run_batch([queue.popleft() for _ in range(min(size, len(queue)))])))
            yield from self._finished(jobs)
        yield from self._finished(jobs)

    # -- internals -------------------------------------------------------------------------------

    def _window(self, job: _Job, chunk: Chunk) -> _Window:
        assert job.audio is not None
        return _Window(job, chunk, window_features(job.audio, chunk, self.asr.model.dims.n_mels))

    def _finished(self, jobs: "deque[_Job]") -> Iterator[tuple[K, Union[TranscriptionResult, BaseException]]]:
        while jobs and jobs[0].done:
            job = jobs.popleft()
            job.audio = None
            yield job.key, (job.error if job.error is not None else self._result(job))

    def _run_batch(self, windows: list[_Window]) -> list[_Window]:
        """Decode ``windows`` together; return the continuation windows they ask for."""
        windows = [w for w in windows if w.job.error is None]
        if not windows:
            return []
        try:
            return self._decode(windows)
        except Exception as error:
            if len(windows) == 1:
                windows[0].job.error = error
                return []
        # Find the culprit: decode one by one, failing only the recordings that fail alone.
        more: list[_Window] = []
        for window in windows:
            if window.job.error is None:
                try:
                    more += self._decode([window])
                except Exception as error:  # reported per recording, never fatal to the batch
                    window.job.error = error
        return more

    def _decode(self, windows: list[_Window]) -> list[_Window]:
        asr, options = self.asr, self.options
        started = time.perf_counter()
        features = asr.encode(torch.stack([w.mel for w in windows]))
        share = (time.perf_counter() - started) / len(windows)
        for w in windows:
            w.job.encoder_seconds += share

        def decode(temperature: float, pending: list[int]) -> list[WindowResult]:
            rows = features[pending] if len(pending) < len(windows) else features
            return asr.decode_windows(
                rows, self.prompt, options, temperature=temperature, stats=self.stats, extra_processors=self.extra_processors
            )

        results = decode_with_fallback(decode, len(windows), options)
        # Everything that can fail happens before any job is updated, so a retry after an error
        # never records a window twice.
        outcomes = []
        for i, (window, result) in enumerate(zip(windows, results)):
            pieces, rest = self._pieces(window, result, features[i : i + 1])
            decoded = _Decoded(window.chunk, pieces, result)
            outcomes.append((window, decoded, None if rest is None else self._window(window.job, rest)))
        more: list[_Window] = []
        for window, decoded, continuation in outcomes:
            window.job.windows.append(decoded)
            window.job.outstanding -= 1
            if continuation is not None:
                window.job.outstanding += 1
                more.append(continuation)
        return more

    def _pieces(self, window: _Window, result: WindowResult, features: torch.Tensor) -> tuple[list[SegmentPiece], Optional[Chunk]]:
        """The window's segments (times absolute), and the rest of the chunk to decode in a
        continuation window, if any.

        Like long-form decoding, a window whose last timestamp pair closes before the chunk ends
        (the model stopped early, often when speech runs up to the window's end) continues from
        that timestamp in a new window instead of losing the rest of the chunk.
        """
        options, tokenizer = self.options, self.asr.tokenizer
        if is_silence(result, options):
            return [], None
        chunk = window.chunk
        rest_chunk: Optional[Chunk] = None
        frames = (chunk.end - chunk.start) // HOP_LENGTH
        tokens = result.tokens
        if options.without_timestamps:
            pieces = [SegmentPiece(start=chunk.offset, end=chunk.offset + chunk.duration, tokens=tokens)]
        else:
            pieces, next_seek, single_ending = split_by_timestamps(
                tokens, timestamp_begin=tokenizer.timestamp_begin, time_offset=chunk.offset,
                seek=chunk.start // HOP_LENGTH, segment_size=frames,
            )
            resume_at = next_seek * HOP_LENGTH
            covered = sum(len(p.tokens) for p in pieces)
            rest = tokens[covered:]
            if not single_ending and chunk.start < resume_at and chunk.end - resume_at >= MIN_CONTINUATION_SAMPLES:
                rest_chunk = Chunk(resume_at, chunk.end)
            elif any(t < tokenizer.eot for t in rest):
                # Text after the last closed pair: long-form would decode it again from there;
                # an independent window keeps it as a last segment up to the chunk's end.
                start = pieces[-1].end if pieces else chunk.offset
                pieces.append(SegmentPiece(start=start, end=chunk.offset + chunk.duration, tokens=rest))
        # The model may place a timestamp in the zero padding after a short chunk: clamp to the audio.
        chunk_end = chunk.offset + chunk.duration
        for piece in pieces:
            piece.start = min(max(piece.start, chunk.offset), chunk_end)
            piece.end = min(max(piece.end, piece.start), chunk_end)
        if options.word_timestamps:
            add_word_timestamps(
                self.asr.model, tokenizer, pieces, features, num_frames=frames, time_offset=chunk.offset,
                options=options, last_speech_timestamp=chunk.offset,
            )
        return pieces, rest_chunk

    def _result(self, job: _Job) -> TranscriptionResult:
        tokenizer = self.asr.tokenizer
        segments: list[Segment] = []
        for decoded in sorted(job.windows, key=lambda d: d.chunk.start):
            segments += assemble_segments(
                decoded.pieces, decoded.result, seek=decoded.chunk.start // HOP_LENGTH, tokenizer=tokenizer,
                first_id=len(segments),
            )
        return TranscriptionResult(
            segments=segments, duration=job.duration, language=prompt_language(tokenizer, self.options),
            encoder_seconds=job.encoder_seconds,
        )
