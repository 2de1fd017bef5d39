"""Per-session recognizers over one shared model, and the compute limiter that shares the cores.

The server loads the model once. Each session gets its own recognizer (its audio window,
hypotheses and committed words are per-session state) from a ``RecognizerFactory``.

Recognizer calls run in worker threads (one per ``RecognizerStage``), so the
event loop keeps serving every connection while a decode runs. ``ComputeLimiter`` caps how many
decodes run at once across all sessions: on a 2-core machine, eight sessions decoding at the
same time would each get a quarter of a core and every one would fall behind; with a few slots
the sessions take turns and latency grows smoothly with load.
"""

from __future__ import annotations

import dataclasses
import threading
from importlib import resources
from typing import Any, Optional, Protocol

import numpy as np

from burble.cpu_threads import available_cores
from burble.streaming.events import StreamEvent
from burble.streaming.factory import RecognizerChoice
from burble.streaming.server.protocol import SessionConfig
from burble.streaming.stages import Recognizer

# 2 s of real speech ("And so my fellow Americans", JFK 1961, public domain; 16 kHz mono FLAC).
# Warm-up needs words: a decode of silence yields none and so never reaches the word-timing DTW,
# whose first call compiles (about a second of the first session's latency otherwise).
WARM_UP_CLIP = "warmup.flac"


class RecognizerFactory(Protocol):
    """Makes one recognizer per session.

    Attributes:
      model_name: reported in ``ready`` and ``/healthz``.
      supported: start-message options this factory honours (``"language"``, ``"hotwords"``).
      fixed_language: the only language of a monolingual model (asking for it is fine).
    """

    model_name: str
    supported: frozenset[str]
    fixed_language: Optional[str]

    def create(self, config: SessionConfig) -> Recognizer:
        """A fresh recognizer for a session started with ``config``."""
        ...

    def warm_up(self) -> None:
        """Pay the one-off cost of the first recognition now (the server calls it before it
        listens), so that the first session is as fast as the ones after it."""
        ...


def unsupported_options(factory: RecognizerFactory, config: SessionConfig) -> list[str]:
    """Options the client asked for that the factory cannot honour (reported in ``ready``)."""
    asked = []
    if config.hotwords:
        asked.append("hotwords")
    if config.language is not None and config.language != factory.fixed_language:
        asked.append("language")
    return [name for name in asked if name not in factory.supported]


def default_compute_slots() -> int:
    """Compute slots when none are configured: one per CPU core this process may use."""
    return available_cores()


class ComputeLimiter:
    """At most ``slots`` recognizer calls at once, process-wide (a semaphore held in the worker).

    Args:
      slots: concurrent calls; ``None``: ``default_compute_slots()``.
    """

    def __init__(self, slots: Optional[int] = None) -> None:
        self.slots = slots or default_compute_slots()
        self._semaphore = threading.BoundedSemaphore(self.slots)
        self._lock = threading.Lock()
        self.running = 0
        self.waiting = 0

    def wrap(self, recognizer: Recognizer) -> "LimitedRecognizer":
        return LimitedRecognizer(recognizer, self)

    def __enter__(self) -> None:
        with self._lock:
            self.waiting += 1
        self._semaphore.acquire()
        with self._lock:
            self.waiting -= 1
            self.running += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self.running -= 1
        self._semaphore.release()


class LimitedRecognizer:
    """A ``Recognizer`` whose calls wait for a ``ComputeLimiter`` slot (runs in worker threads)."""

    def __init__(self, inner: Recognizer, limiter: ComputeLimiter) -> None:
        self.inner = inner
        self.limiter = limiter

    def accept(self, audio: np.ndarray, start_sample: int) -> list[StreamEvent]:
        with self.limiter:
            return self.inner.accept(audio, start_sample)

    def endpoint(self, at_sample: int) -> list[StreamEvent]:
        with self.limiter:
            return self.inner.endpoint(at_sample)

    def pause(self, at_sample: int) -> list[StreamEvent]:
        with self.limiter:
            return self.inner.pause(at_sample)

    def flush(self) -> list[StreamEvent]:
        with self.limiter:
            return self.inner.flush()

    @property
    def decodes_at_pauses(self) -> bool:
        return bool(getattr(self.inner, "decodes_at_pauses", False))


class WhisperRecognizerFactory:
    """Streaming Whisper recognizers sharing one loaded ``WhisperASR``.

    Args:
      asr: the loaded model (``burble.load_model``), shared read-only by all sessions.
      options: the recognizer's ``StreamingOptions`` (``None``: its defaults); a session's
        ``language`` (and ``hotwords``, where the options have such a field) override them.
      model_name: name reported to clients.
      choice: which recognizer each session gets (cache-aware or re-encoding encoder), built by
        :meth:`~burble.streaming.factory.RecognizerChoice.build`.
    """

    def __init__(
        self, asr: Any, options: Any = None, *, model_name: Optional[str] = None, choice: RecognizerChoice = RecognizerChoice()
    ) -> None:
        from burble.streaming.recognizer import StreamingOptions

        self.asr = asr
        self.choice = choice
        self.options = options if options is not None else StreamingOptions()
        self.model_name = model_name or getattr(asr, "name", "whisper")
        fields = {f.name for f in dataclasses.fields(self.options)}
        supported = {"hotwords"} & fields
        # An English-only checkpoint cannot honour another language: report it as unsupported.
        multilingual = bool(getattr(getattr(asr, "tokenizer", None), "multilingual", False))
        if "language" in fields and multilingual:
            supported.add("language")
        self.supported = frozenset(supported)
        self.fixed_language = None if multilingual else "en"

    def create(self, config: SessionConfig) -> Recognizer:
        overrides: dict[str, Any] = {}
        if config.language is not None and "language" in self.supported:
            overrides["language"] = config.language
        if config.hotwords and "hotwords" in self.supported:
            overrides["hotwords"] = tuple(config.hotwords)
        options = dataclasses.replace(self.options, **overrides) if overrides else self.options
        return self.choice.build(self.asr, options)

    def warm_up(self) -> None:
        """One short decode of real speech through a session's recognizer (encoder, decoder,
        biasing and word timing all run once, on whichever encoder path ``choice`` selects),
        then the recognizer is thrown away."""
        import soundfile

        with resources.files("burble.streaming.server").joinpath(WARM_UP_CLIP).open("rb") as clip:
            audio, _ = soundfile.read(clip, dtype="float32")
        recognizer = self.create(SessionConfig())
        recognizer.accept(audio, 0)
        recognizer.flush()
