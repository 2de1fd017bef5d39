"""Shared helpers for the streaming tests: real recordings from ``../shared/dev-audio``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from burble.testing.dev_audio import dev_item, require_shared


def dev_path(item_id: str) -> Path:
    """Path of a dev-audio recording (skips the test when the shared folder is missing)."""
    require_shared("dev-audio")
    return dev_item(item_id).audio_path


def dev_audio(item_id: str) -> tuple[np.ndarray, int]:
    """A dev-audio recording as float32 mono at its own rate."""
    x, sr = sf.read(str(dev_path(item_id)), dtype="float32", always_2d=True)
    return x.mean(axis=1), sr


@pytest.fixture(scope="session")
def lj_speech() -> np.ndarray:
    """LJ Speech LJ001-0001: 9.7 s of clean read speech, 16 kHz."""
    x, sr = dev_audio("lj_LJ001-0001")
    assert sr == 16000
    return x
