"""Fixtures for the burble.audio tests: real dev recordings at their own sample rate."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import soundfile as sf

from burble.testing.dev_audio import dev_item, require_shared

DevRecording = Callable[[str], tuple[np.ndarray, int]]


@pytest.fixture(scope="session")
def dev_recording() -> DevRecording:
    """``dev_recording(item_id) -> (float32 mono samples, rate)``, read without resampling (skips
    without ``../shared``) so the resampler under test is the only one involved."""

    def read(item_id: str) -> tuple[np.ndarray, int]:
        require_shared("dev-audio")
        samples, rate = sf.read(str(dev_item(item_id).audio_path), dtype="float32", always_2d=True)
        return samples.mean(axis=1), rate

    return read


@pytest.fixture(scope="session")
def lj_speech(dev_recording: DevRecording) -> np.ndarray:
    """LJ Speech LJ001-0001: 9.7 s of clean read speech, 16 kHz."""
    samples, rate = dev_recording("lj_LJ001-0001")
    assert rate == 16000
    return samples
