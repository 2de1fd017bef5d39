"""``WhisperASR``: the object ``burble.load_model()`` returns, one loaded Whisper behind one API.

It only delegates; each job lives in its own module below it:

========================  ==========================================================
:mod:`~burble.asr.loaded`       the model on its device, the tokenizer, token lists
:mod:`~burble.asr.prompt`       the prompt of a window (a pure function of the options)
:mod:`~burble.asr.processors`   suppression, the blank rule, the timestamp grammar
:mod:`~burble.asr.search`       one window: the search strategy and its scores
:mod:`~burble.asr.batching`     many windows as the rows of one decode
:mod:`~burble.asr.transcribe`   long-form: 30 s windows and seeking
:mod:`~burble.asr.window`       what a window's result means (fallback, no-speech, segments)
========================  ==========================================================

Biasing (shallow fusion, phrase boosting) is passed per call (``extra_processors``); the model
holds no per-call state, so one instance serves concurrent callers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Concatenate, Optional, ParamSpec, Sequence, TypeVar

import torch

from burble.asr.batching import decode_rows, decode_windows
from burble.asr.loaded import LoadedWhisper
from burble.asr.options import TranscribeOptions
from burble.asr.processors import ProcessorFactory
from burble.asr.prompt import build_prompt
from burble.asr.results import TranscriptionResult
from burble.asr.search import decode_window
from burble.asr.tokenizer import WhisperTokenizer
from burble.asr.transcribe import transcribe
from burble.asr.whisper.loading import Checkpoint, load_checkpoint
from burble.asr.whisper.model import Whisper
from burble.audio.io import AudioInput
from burble.precision import torch_dtype

Params = ParamSpec("Params")
Returned = TypeVar("Returned")


def _bound(
    function: Callable[Concatenate[LoadedWhisper, Params], Returned],
) -> Callable[Concatenate["WhisperASR", Params], Returned]:
    """A method calling ``function`` with the model's :class:`LoadedWhisper` first."""

    def method(self: "WhisperASR", *args: Params.args, **kwargs: Params.kwargs) -> Returned:
        return function(self.whisper, *args, **kwargs)

    method.__name__, method.__doc__ = function.__name__, function.__doc__
    return method


class WhisperASR:
    """A ready-to-use Whisper recogniser.

    Args:
      checkpoint: loaded weights, tokenizer path and config.
      device: torch device to run on.
      dtype: weights, activations and caches: ``"float32"`` (default), ``"float16"`` or
        ``"bfloat16"`` (see :mod:`burble.precision`; logits stay float32).
      static_decode: single-token decoder steps at static shapes, replayed from CUDA graphs on a GPU
        (:mod:`burble.asr.whisper.static_decoder`); the same tokens either way.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
        static_decode: bool = False,
    ) -> None:
        self.whisper = LoadedWhisper.from_checkpoint(
            checkpoint, device, dtype=torch_dtype(dtype), static_decode=static_decode
        )
        if self.whisper.device.type == "cpu" and self.whisper.model.dtype == torch.float32:
            # The int8 logit screen's table (~0.15 s): built here, not in the first window's decode.
            self.whisper.model.decoder.int8_embedding()

    @property
    def name(self) -> str:
        return self.whisper.name

    @property
    def model(self) -> Whisper:
        return self.whisper.model

    @property
    def tokenizer(self) -> WhisperTokenizer:
        return self.whisper.tokenizer

    @property
    def device(self) -> torch.device:
        return self.whisper.device

    @property
    def dtype(self) -> torch.dtype:
        return self.whisper.model.dtype

    # -- one window ------------------------------------------------------------------------------

    def encode(self, mel: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, 1500, D)`` of ``(n_mels, 3000)`` or ``(B, n_mels, 3000)`` features."""
        return self.whisper.encode(mel)

    def build_prompt(self, previous_tokens: Sequence[int], options: TranscribeOptions, prefix: Optional[str] = None) -> list[int]:
        """``[<|startofprev|> previous...] <|startoftranscript|> [lang task] [<|notimestamps|>]``."""
        return build_prompt(self.tokenizer, self.model.dims.n_text_ctx, previous_tokens, options, prefix)

    # The functions bound to this model's LoadedWhisper (type checkers see their parameters).
    decode_window = _bound(decode_window)
    decode_windows = _bound(decode_windows)
    decode_rows = _bound(decode_rows)

    # -- whole inputs ----------------------------------------------------------------------------

    def transcribe(
        self,
        audio: AudioInput,
        options: Optional[TranscribeOptions] = None,
        *,
        progress: Optional[Callable[[float], None]] = None,
        extra_processors: Optional[ProcessorFactory] = None,
        **overrides: Any,
    ) -> TranscriptionResult:
        """Transcribe a file path or 16 kHz mono samples of any length.

        Keyword overrides are :class:`TranscribeOptions` fields, e.g. ``beam_size=1``.
        ``extra_processors`` adds this call's biasing (:func:`burble.asr.fusion.processor_factory`).
        """
        options = options or TranscribeOptions()
        if overrides:
            options = replace(options, **overrides)
        return transcribe(self.whisper, audio, options, progress=progress, extra_processors=extra_processors)


def load_model(
    name: str = "tiny.en",
    *,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
    static_decode: bool = False,
    threads: Optional[int] = None,
) -> WhisperASR:
    """Load a Whisper recogniser: ``"tiny.en"`` (embedded default), ``"base"``, or a checkpoint path.

    Args:
      name: checkpoint name or path.
      device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
      dtype: ``"float32"`` (default, the reference), ``"float16"`` or ``"bfloat16"``. Half
        precision is meant for GPUs; on CPUs, float16 matmuls are slow (JFK clip on this project's
        2-core machine: float32 0.55 s, bfloat16 0.36 s, float16 1.9 s).
      static_decode: decoder steps at static shapes in CUDA graphs (``--cuda-graphs``); on a CPU
        the same static step runs eagerly (not meant to be faster; it is how the path is tested without a GPU).
      threads: torch CPU threads (``None``: leave torch's setting).
    """
    dtype = torch_dtype(dtype)  # an unknown name fails before the weights load
    if threads:
        torch.set_num_threads(threads)
    return WhisperASR(load_checkpoint(name), device=device, dtype=dtype, static_decode=static_decode)
