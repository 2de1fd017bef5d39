"""Inputs for batch-transcription tests: small manifests of real dev clips, and broken audio files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from burble.testing.dev_audio import DevItem, dev_audio_items


def short_dev_items(count: int = 8, max_seconds: float = 4.0) -> list[DevItem]:
    """The ``count`` shortest transcribed dev recordings (each at most ``max_seconds``)."""
    items = sorted((it for it in dev_audio_items() if it.duration_s <= max_seconds), key=lambda it: it.duration_s)
    if len(items) < count:
        raise ValueError(f"only {len(items)} dev clips are <= {max_seconds} s, {count} wanted")
    return items[:count]


def write_manifest(path: str | Path, rows: list[dict]) -> Path:
    """Write ``rows`` as a JSONL manifest."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def dev_manifest(path: str | Path, items: list[DevItem]) -> Path:
    """A burble manifest (``id``, absolute ``audio``, ``text``) of dev recordings."""
    return write_manifest(path, [{"id": it.id, "audio": str(it.audio_path), "text": it.text} for it in items])


def broken_audio_files(folder: str | Path) -> dict[str, Path]:
    """Files a batch job must report and skip: ``corrupt`` (a WAV header then junk), ``empty``
    (0 bytes), ``not_audio`` (text named .wav), ``no_samples`` (a valid WAV with zero frames)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "corrupt": folder / "corrupt.wav",
        "empty": folder / "empty.wav",
        "not_audio": folder / "not_audio.wav",
        "no_samples": folder / "no_samples.wav",
    }
    files["corrupt"].write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(64)))
    files["empty"].write_bytes(b"")
    files["not_audio"].write_text("this is a text file, not audio\n" * 20)
    sf.write(files["no_samples"], np.zeros(0, dtype=np.float32), 16000)
    return files
