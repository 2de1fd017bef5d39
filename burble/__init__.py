"""burble: streaming speech and audio toolkit.

``burble.load_model("tiny.en").transcribe("speech.wav")`` runs real Whisper weights in burble's
own PyTorch model, decoded by burble's shared autoregressive + speculative decoding core.

The public names are imported on first use (PEP 562), so ``import burble`` (and the CLI's
``--help``) does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burble.asr.options import TranscribeOptions
    from burble.asr.pipeline import WhisperASR, load_model
    from burble.asr.results import Segment, TranscriptionResult, Word

_EXPORTS = {
    "load_model": "burble.asr.pipeline",
    "WhisperASR": "burble.asr.pipeline",
    "TranscribeOptions": "burble.asr.options",
    "TranscriptionResult": "burble.asr.results",
    "Segment": "burble.asr.results",
    "Word": "burble.asr.results",
}

__all__ = ["load_model", "WhisperASR", "TranscribeOptions", "TranscriptionResult", "Segment", "Word"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'burble' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
