"""Helpers for tests and benchmarks: real dev recordings and deterministic synthetic speech."""

from burble.testing.audio import SAMPLE_RATE, read_audio, resample
from burble.testing.dev_audio import (
    DevItem,
    dev_audio_items,
    dev_item,
    require_shared,
    shared_dir,
    untranscribed_items,
)
from burble.testing.synthetic import (
    SyntheticClip,
    espeak_speech,
    piper_speech,
    speech_engines_available,
    synthetic_clips,
)

__all__ = [
    "SAMPLE_RATE", "DevItem", "SyntheticClip", "dev_audio_items", "dev_item", "espeak_speech",
    "piper_speech", "read_audio", "require_shared", "resample", "shared_dir", "speech_engines_available",
    "synthetic_clips", "untranscribed_items",
]
