"""Helpers for tests and benchmarks: real dev recordings and deterministic synthetic speech."""

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
    "DevItem", "SyntheticClip", "dev_audio_items", "dev_item", "espeak_speech",
    "piper_speech", "require_shared", "shared_dir", "speech_engines_available",
    "synthetic_clips", "untranscribed_items",
]
