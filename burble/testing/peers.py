"""Run peer systems (faster-whisper / CTranslate2) on the same weights, for parity tests and benchmarks."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np


def peer_model_dir(name: str) -> Path:
    """A CTranslate2 directory of a packaged model that faster-whisper can open (parts joined once)."""
    from burble.asr.whisper.loading import materialize_ct2_dir, resolve_model_files

    parts, directory = resolve_model_files(name)
    if len(parts) == 1:
        return directory
    cache = Path(os.environ.get("BURBLE_CACHE", Path.home() / ".cache" / "burble"))
    return materialize_ct2_dir(name, cache / "ct2" / name)


@lru_cache(maxsize=4)
def faster_whisper_model(name: str, compute_type: str = "float32", threads: int = 2):
    from faster_whisper import WhisperModel

    return WhisperModel(str(peer_model_dir(name)), device="cpu", compute_type=compute_type, cpu_threads=threads)


def faster_whisper_tokens(
    name: str, audio: np.ndarray | str, *, compute_type: str = "float32", beam_size: int = 1
) -> list[list[int]]:
    """Token ids of each segment from faster-whisper at temperature 0 without conditioning.

    Args:
      name: packaged model name.
      audio: samples at 16 kHz or a file path.
      compute_type: CTranslate2 compute type.
      beam_size: 1 is greedy search (the default); > 1 is beam search.
    """
    model = faster_whisper_model(name, compute_type)
    segments, _ = model.transcribe(
        audio, beam_size=beam_size, temperature=0.0, condition_on_previous_text=False, language="en"
    )
    return [list(s.tokens) for s in segments]
