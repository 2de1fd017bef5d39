"""Streaming voice activity detection: silero-vad (ONNX) gated by frame energy, with endpoints.

Each 512-sample frame (32 ms at 16 kHz, the only size silero-vad v5 accepts) gets a speech
probability from silero-vad and an RMS level in dBFS. A frame is speech only if both agree
(hybrid gate): the probability passes the threshold (a lower one while already in speech:
hysteresis) *and* the level passes ``energy_threshold_db``. The energy gate removes silero's
occasional activations on very quiet input (room tone, dithering, faint clicks), which would
otherwise wake the recognizer and invite Whisper to hallucinate on near-silence.

Utterances:

- **Onset**: ``min_speech_seconds`` of consecutive speech frames open an utterance. Its audio
  starts ``pre_roll_seconds`` before the first speech frame, so first words are not clipped.
- **Hangover**: the utterance's audio runs ``hangover_seconds`` past its last speech frame.
- **Endpoints**, like sherpa-onnx's three rules:

  1. ``no_speech``: trailing silence >= ``silence_no_speech_seconds`` when the utterance holds
     less than ``min_utterance_speech_seconds`` of speech (a false start: a cough, a click);
  2. ``silence``: trailing silence >= ``silence_after_speech_seconds`` after real speech;
  3. ``max_length``: the utterance reached ``max_utterance_seconds`` (forces a commit; if the
     speaker goes on, the next frames open a new utterance right away).

  The pipeline also ends an utterance with reason ``gap`` when audio is missing (dropped).

Times are absolute 16 kHz sample indices from the start of the stream. ``StreamingVAD.process``
takes audio in pieces of any length and returns ``VADEvent``s; ``detect_speech`` runs it over a
whole array (offline segmentation, tests).

Note: ``import silero_vad`` calls ``torch.set_num_threads(1)`` as a side effect; ``SileroVAD``
restores the caller's thread count.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal, Optional, Protocol

import numpy as np

from burble.audio import SAMPLE_RATE

FRAME_SAMPLES = 512  # silero-vad v5 at 16 kHz accepts exactly this

EndpointReason = Literal["no_speech", "silence", "max_length", "gap", "end_of_stream"]


@dataclass(frozen=True)
class VADOptions:
    """Voice activity detection and endpoint settings (seconds unless noted).

    Attributes:
      threshold: silero speech probability at which a frame counts as speech.
      neg_threshold: probability below which a frame stops counting as speech once in speech
        (hysteresis); ``None`` means ``threshold - 0.15``.
      energy_threshold_db: frames with RMS below this level (dBFS) are never speech.
      min_speech_seconds: consecutive speech needed to open an utterance.
      pre_roll_seconds: audio kept before the first speech frame.
      hangover_seconds: audio kept after the last speech frame.
      silence_after_speech_seconds: rule 2, trailing silence that ends an utterance with speech.
      silence_no_speech_seconds: rule 1, trailing silence that ends an utterance without enough
        speech.
      min_utterance_speech_seconds: speech an utterance needs to count as "with speech".
      max_utterance_seconds: rule 3, the longest utterance.
    """

    threshold: float = 0.5
    neg_threshold: Optional[float] = None
    energy_threshold_db: float = -50.0
    min_speech_seconds: float = 0.064
    pre_roll_seconds: float = 0.3
    hangover_seconds: float = 0.2
    silence_after_speech_seconds: float = 0.8
    silence_no_speech_seconds: float = 2.0
    min_utterance_speech_seconds: float = 0.15
    max_utterance_seconds: float = 20.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be in (0, 1)")
        if self.neg_threshold is not None and not 0.0 <= self.neg_threshold <= self.threshold:
            raise ValueError("neg_threshold must be in [0, threshold]")
        for name in ("min_speech_seconds", "pre_roll_seconds", "hangover_seconds", "min_utterance_speech_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("silence_after_speech_seconds", "silence_no_speech_seconds"):
            if getattr(self, name) < self.hangover_seconds:
                raise ValueError(f"{name} must be >= hangover_seconds")
        if self.max_utterance_seconds <= self.pre_roll_seconds + self.min_speech_seconds:
            raise ValueError("max_utterance_seconds is too short")

    @property
    def effective_neg_threshold(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(0.0, self.threshold - 0.15)

    @property
    def lookback_seconds(self) -> float:
        """How far back, from the newest audio, the VAD may still need samples."""
        return (
            max(self.silence_after_speech_seconds, self.silence_no_speech_seconds)
            + self.pre_roll_seconds
            + self.min_speech_seconds
            + 2 * FRAME_SAMPLES / SAMPLE_RATE
        )


class SpeechModel(Protocol):
    """Per-frame speech probability with internal (recurrent) state."""

    def __call__(self, frame: np.ndarray) -> float:
        """Probability that ``frame`` (512 float32 samples at 16 kHz) is speech."""
        ...

    def reset(self) -> None:
        """Forget the state (a discontinuity in the audio)."""
        ...


class SileroVAD:
    """silero-vad v5 run directly with onnxruntime (the model file ships in the ``silero-vad``
    package; its own wrapper round-trips every frame through torch, which costs as much as the
    model itself).

    The model is recurrent: each call takes the previous 64 samples as context plus a
    ``(2, 1, 128)`` state, so frames must be fed in stream order (``reset`` after a gap). That
    state is passed in and out explicitly, so every instance of a process shares one ONNX session
    (~10 MB each otherwise: a server session apiece); onnxruntime's ``run`` is thread-safe.

    Args:
      opset_version: which bundled ONNX export to use (15 or 16).
    """

    CONTEXT = 64

    def __init__(self, opset_version: int = 16) -> None:
        if opset_version not in (15, 16):
            raise ValueError("opset_version must be 15 or 16")
        self._session = _shared_session(opset_version)
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def __call__(self, frame: np.ndarray) -> float:
        if frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"silero-vad needs frames of exactly {FRAME_SAMPLES} samples, got {frame.shape}")
        frame = np.asarray(frame, dtype=np.float32)
        x = np.concatenate([self._context, frame])[None]
        prob, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._context = frame[-self.CONTEXT :].copy()
        return float(prob[0, 0])

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(self.CONTEXT, dtype=np.float32)


@functools.lru_cache(maxsize=2)
def _shared_session(opset_version: int) -> "onnxruntime.InferenceSession":
    """The process's one silero ONNX session per export (made on first use)."""
    import torch

    threads = torch.get_num_threads()
    try:
        try:
            import silero_vad  # noqa: F401  (locates the bundled model files)
            import onnxruntime
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "the VAD needs silero-vad and onnxruntime: pip install silero-vad onnxruntime"
            ) from e
    finally:
        # Importing silero_vad sets torch to one thread for the whole process; undo that.
        torch.set_num_threads(threads)
    from importlib import resources

    name = "silero_vad.onnx" if opset_version == 16 else "silero_vad_16k_op15.onnx"
    path = resources.files("silero_vad.data").joinpath(name)
    opts = onnxruntime.SessionOptions()
    # One frame is tiny: threads would only add synchronisation (and steal the recognizer's cores).
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    with resources.as_file(path) as model_file:
        return onnxruntime.InferenceSession(
            str(model_file), sess_options=opts, providers=["CPUExecutionProvider"]
        )


def frame_level_db(frame: np.ndarray) -> float:
    """RMS level of a frame in dB relative to full scale (a full-scale sine is about -3 dB)."""
    power = float(np.mean(np.square(frame, dtype=np.float64)))
    return 10.0 * math.log10(power + 1e-12)


@dataclass(frozen=True)
class VADEvent:
    """An utterance boundary.

    Attributes:
      kind: ``"start"`` (an utterance opened; ``sample`` already includes the pre-roll) or
        ``"end"`` (the utterance's audio ends at ``sample``, exclusive).
      sample: absolute 16 kHz sample index.
      reason: for ``end``: which endpoint rule fired.
    """

    kind: Literal["start", "end"]
    sample: int
    reason: Optional[EndpointReason] = None


class StreamingVAD:
    """Hybrid (silero + energy) streaming VAD with pre-roll, hangover and endpoint rules.

    Feed contiguous 16 kHz float32 audio of any length to ``process``; it works in 512-sample
    frames and keeps the remainder for the next call.

    Args:
      options: thresholds and endpoint rules.
      model: per-frame speech probability; default a new ``SileroVAD``.
    """

    def __init__(self, options: VADOptions = VADOptions(), model: Optional[SpeechModel] = None) -> None:
        self.options = options
        self.model: SpeechModel = model if model is not None else SileroVAD()
        sr = SAMPLE_RATE
        self._min_speech_frames = max(1, math.ceil(options.min_speech_seconds * sr / FRAME_SAMPLES))
        self._pre_roll = int(round(options.pre_roll_seconds * sr))
        self._hangover = int(round(options.hangover_seconds * sr))
        self._rule1 = int(round(options.silence_no_speech_seconds * sr))
        self._rule2 = int(round(options.silence_after_speech_seconds * sr))
        self._min_utt_speech = int(round(options.min_utterance_speech_seconds * sr))
        self._max_utt = int(round(options.max_utterance_seconds * sr))
        self.reset()

    def reset(self, at_sample: int = 0) -> None:
        """Start over at absolute index ``at_sample`` (no open utterance, fresh model state)."""
        self.model.reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._processed = at_sample  # frames before this index were classified
        self._floor = at_sample  # an utterance may not start before this (previous end)
        self._run = 0  # consecutive speech frames
        self._utt_start: Optional[int] = None
        self._last_speech_end = at_sample
        self._speech_samples = 0
        self.last_probability = 0.0
        self.last_level_db = -120.0

    # ------------------------------------------------------------------------------ properties
    @property
    def in_utterance(self) -> bool:
        return self._utt_start is not None

    @property
    def utterance_start(self) -> Optional[int]:
        return self._utt_start

    @property
    def processed_index(self) -> int:
        """Absolute index up to which audio was classified."""
        return self._processed

    @property
    def received_index(self) -> int:
        """Absolute index one past the last sample given to ``process``."""
        return self._processed + len(self._pending)

    @property
    def speech_end(self) -> Optional[int]:
        """While in an utterance: the index up to which its audio is certain to belong to it
        (last speech frame plus hangover, capped at what was processed)."""
        if self._utt_start is None:
            return None
        return max(self._utt_start, min(self._last_speech_end + self._hangover, self._processed))

    @property
    def last_speech_end_index(self) -> int:
        """One past the last speech frame heard (of the utterance just ended, after an endpoint)."""
        return self._last_speech_end

    @property
    def in_pause(self) -> bool:
        """In an utterance whose speech stopped a hangover ago: :attr:`speech_end` will not move
        until speech resumes, so the audio up to it is all there is for now."""
        return self._utt_start is not None and self._processed >= self._last_speech_end + self._hangover

    # ------------------------------------------------------------------------------ processing
    def process(self, audio: np.ndarray) -> list[VADEvent]:
        """Classify new contiguous audio; return the utterance boundaries it completes.

        Args:
          audio: 1-D float32 16 kHz samples continuing the stream.
        """
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError(f"expected mono 1-D audio, got shape {audio.shape}")
        buf = np.concatenate([self._pending, audio]) if len(self._pending) else audio
        n_frames = len(buf) // FRAME_SAMPLES
        events: list[VADEvent] = []
        for i in range(n_frames):
            frame = buf[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
            self._step(frame, events)
        self._pending = buf[n_frames * FRAME_SAMPLES :].copy()
        return events

    def _step(self, frame: np.ndarray, events: list[VADEvent]) -> None:
        opts = self.options
        start = self._processed
        end = start + FRAME_SAMPLES
        prob = self.model(frame)
        level = frame_level_db(frame)
        self.last_probability, self.last_level_db = prob, level
        threshold = opts.effective_neg_threshold if self.in_utterance else opts.threshold
        speech = prob >= threshold and level >= opts.energy_threshold_db
        self._processed = end

        if self._utt_start is None:
            self._run = self._run + 1 if speech else 0
            if self._run >= self._min_speech_frames:
                first = end - self._run * FRAME_SAMPLES
                self._utt_start = max(self._floor, first - self._pre_roll)
                self._last_speech_end = end
                self._speech_samples = self._run * FRAME_SAMPLES
                events.append(VADEvent("start", self._utt_start))
            return

        if speech:
            self._last_speech_end = end
            self._speech_samples += FRAME_SAMPLES
        trailing = end - self._last_speech_end
        has_speech = self._speech_samples >= self._min_utt_speech
        if has_speech and trailing >= self._rule2:
            self._end_utterance(self._last_speech_end + self._hangover, "silence", events)
        elif not has_speech and trailing >= self._rule1:
            self._end_utterance(self._last_speech_end + self._hangover, "no_speech", events)
        elif end - self._utt_start >= self._max_utt:
            # Cut at exactly the maximum; the rest of this frame opens the next utterance.
            self._end_utterance(self._utt_start + self._max_utt, "max_length", events)

    def _end_utterance(self, at: int, reason: EndpointReason, events: list[VADEvent]) -> None:
        at = min(at, self._processed)
        events.append(VADEvent("end", at, reason))
        self._utt_start = None
        self._floor = at
        self._run = 0
        self._speech_samples = 0

    def flush(self, reason: EndpointReason = "end_of_stream") -> list[VADEvent]:
        """End of stream (or a gap): close an open utterance at the last received sample.

        The sub-frame remainder is counted into the utterance but not classified.
        """
        events: list[VADEvent] = []
        if self._utt_start is not None:
            tail_end = self.received_index
            # Keep the whole tail only if speech was still going on; else end after the hangover.
            if tail_end - self._last_speech_end <= self._hangover + FRAME_SAMPLES:
                at = tail_end
            else:
                at = self._last_speech_end + self._hangover
            self._processed = tail_end
            self._end_utterance(at, reason, events)
        else:
            self._processed = self.received_index
        self._pending = np.zeros(0, dtype=np.float32)
        self._floor = self._processed
        return events


def detect_speech(
    audio: np.ndarray,
    options: VADOptions = VADOptions(),
    model: Optional[SpeechModel] = None,
) -> list[tuple[int, int]]:
    """Utterance spans ``[start, end)`` (16 kHz sample indices) of a whole recording.

    Args:
      audio: 1-D float32 mono audio at 16 kHz.
      options: VAD settings.
      model: speech probability model (default: a new ``SileroVAD``).
    """
    vad = StreamingVAD(options, model)
    events = vad.process(audio) + vad.flush()
    spans: list[tuple[int, int]] = []
    start: Optional[int] = None
    for ev in events:
        if ev.kind == "start":
            start = ev.sample
        elif start is not None:
            spans.append((start, ev.sample))
            start = None
    return spans
