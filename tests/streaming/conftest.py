"""Fixtures for the streaming tests."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_helpers import dev_audio


@pytest.fixture(scope="session")
def lj_speech() -> np.ndarray:
    """LJ Speech LJ001-0001: 9.7 s of clean read speech, 16 kHz."""
    x, sr = dev_audio("lj_LJ001-0001")
    assert sr == 16000
    return x
