"""Fixtures shared by the Whisper model tests."""

from __future__ import annotations

import pytest
import torch

import burble
from burble.asr.whisper.model import WhisperTextModel


@pytest.fixture(scope="module")
def text_model() -> WhisperTextModel:
    """tiny.en's decoder bound to random audio states (fixed seed)."""
    asr = burble.load_model("tiny.en")
    torch.manual_seed(0)
    features = torch.randn(1, 1500, asr.whisper.model.dims.n_audio_state) * 0.5
    return WhisperTextModel(asr.whisper.model, features)
