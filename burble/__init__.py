"""burble: streaming speech and audio toolkit.

``burble.load_model("tiny.en").transcribe("speech.wav")`` runs real Whisper weights in burble's
own PyTorch model, decoded by burble's shared autoregressive + speculative decoding core.

The public names are imported on first use (PEP 562), so ``import burble`` (and the CLI's
``--help``) does not pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from burble.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
