"""burble: streaming speech and audio toolkit.

``burble.load_model("tiny.en").transcribe("speech.wav")`` runs real Whisper weights in burble's
own PyTorch model, decoded by burble's shared autoregressive + speculative decoding core.
"""

from burble.asr.options import TranscribeOptions
from burble.asr.pipeline import WhisperASR, load_model
from burble.asr.results import Segment, TranscriptionResult, Word

__all__ = ["load_model", "WhisperASR", "TranscribeOptions", "TranscriptionResult", "Segment", "Word"]
__version__ = "0.1.0"
