"""Audio below every model: the sample rate, file loading, resampling and voice activity detection.

Modules (one job each):

- ``io``: ``load_audio`` (any file libsndfile decodes, as mono float32 at 16 kHz),
  ``to_audio_array`` (a path, array or tensor as 16 kHz samples), ``to_pcm16``.
- ``resample``: ``resample`` (a whole signal) and ``StreamingResampler`` (piece by piece), both
  soxr, so offline and streaming audio go through the same filter.
- ``vad``: ``StreamingVAD`` (silero-vad ONNX + energy gate, pre-roll, hangover, endpoints) and
  ``detect_speech`` for whole recordings.

``burble.asr``, ``burble.streaming`` and ``burble.batch`` import from here; this package imports
none of them. Importing it loads neither torch, soxr nor onnxruntime: each loads on first use.
"""

# Whisper's features and silero-vad v5 are both defined at 16 kHz, so every model-facing array in
# burble is at this rate; sources resample to it and sample indices count at it.
SAMPLE_RATE = 16000

__all__ = ["SAMPLE_RATE"]
