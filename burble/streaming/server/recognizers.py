"""Per-session recognizers over one shared model, and how many compute workers share the cores.

The server loads the model once. Each session gets its own recognizer (its audio window,
hypotheses and committed words are per-session state) from a ``RecognizerFactory``.

Recognizer calls run on the server's compute engine (``burble.streaming.engine``), so the event
loop keeps serving every connection while a decode runs. The engine has
``default_compute_slots()`` workers unless configured: on a 2-core machine, eight sessions
decoding at the same time would each get a quarter of a core and every one would fall behind;
with one worker per core the sessions take turns, round-robin, and latency grows smoothly.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from typing import Any, Optional, Protocol


from burble.cpu_threads import available_cores
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
