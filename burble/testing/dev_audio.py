"""The real recordings in ``../shared/dev-audio`` (reference transcripts + one untranscribed file).

The shared folder sits beside the repository (``<repo>/../shared``), in the development checkout
and in the CI clone alike; ``BURBLE_SHARED`` points elsewhere. Tests that need it call
:func:`require_shared` so a checkout without it skips with a clear reason instead of erroring,
except in CI (``CI=true``), where a missing folder fails: CI must run the tests on real audio.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.io import load_audio

ENV_SHARED = "BURBLE_SHARED"
ENV_CI = "CI"


@dataclass(frozen=True)
class DevItem:
    """One recording of the dev set.

    Attributes:
      id: stable identifier from the manifest.
      audio_path: absolute path of the audio file.
      text: verbatim reference (``None`` for the untranscribed recording).
      text_normalized: lower-cased, punctuation-free reference (``None`` when untranscribed).
      duration_s: duration stated by the manifest.
      subset: ``"short"`` or ``"long"`` (``"untranscribed"`` for the untranscribed file).
      kind: source category (e.g. ``librispeech``, ``far-field``).
    """

    id: str
    audio_path: Path
    text: Optional[str]
    text_normalized: Optional[str]
    duration_s: float
    subset: str
    kind: str = ""

    def load(self, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """The audio as float32 mono at ``sample_rate``."""
        return load_audio(self.audio_path, sample_rate)


def _candidates() -> List[Path]:
    env = os.environ.get(ENV_SHARED)
    if env:
        return [Path(env).expanduser()]
    repo_root = Path(__file__).resolve().parents[2]
    # An installed (non-editable) package lives in site-packages, so also try beside the cwd.
    return [repo_root.parent / "shared", Path.cwd().parent / "shared", Path.cwd() / "shared"]


def shared_dir(required: bool = True) -> Optional[Path]:
    """Locate the shared data folder (``BURBLE_SHARED`` or ``<repo>/../shared``).

    Args:
      required: raise ``FileNotFoundError`` when it is missing (else return ``None``).
    """
    for path in _candidates():
        if path.is_dir():
            return path.resolve()
    if required:
        tried = ", ".join(str(p) for p in _candidates())
        raise FileNotFoundError(f"shared data folder not found (tried {tried}); set {ENV_SHARED}")
    return None


def dev_audio_dir(required: bool = True) -> Optional[Path]:
    """``<shared>/dev-audio`` if it exists (with a manifest)."""
    root = shared_dir(required=required)
    if root is not None and (root / "dev-audio" / "manifest.jsonl").is_file():
        return root / "dev-audio"
    if required:
        raise FileNotFoundError(f"no dev-audio/manifest.jsonl under {root}")
    return None


def running_in_ci() -> bool:
    """Whether the ``CI`` environment variable says this is a CI run (``true``/``1``/``yes``)."""
    return os.environ.get(ENV_CI, "").strip().lower() in ("true", "1", "yes")


def require_shared(what: str = "dev-audio") -> Path:
    """pytest helper: return ``<shared>/<what>``; when it is absent, skip the calling test, or
    fail it in CI (``CI=true``), where a skip would hide that the data tests never ran."""
    import pytest

    root = shared_dir(required=False)
    if root is None or not (root / what).exists():
        reason = f"../shared/{what} not available (set {ENV_SHARED})"
        if running_in_ci():
            pytest.fail(f"{reason}; {ENV_CI}=true, so the shared data must be there", pytrace=False)
        pytest.skip(reason)
    return root / what


def _read_jsonl(path: Path) -> List[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: bad JSON line ({e})") from None
    return rows


def _item(row: dict, base: Path, subset: Optional[str] = None) -> DevItem:
    try:
        return DevItem(
            id=row["id"],
            audio_path=(base / row["audio"]).resolve(),
            text=row.get("text"),
            text_normalized=row.get("text_normalized"),
            duration_s=float(row["duration_s"]),
            subset=subset or row.get("subset", ""),
            kind=row.get("kind", ""),
        )
    except KeyError as e:
        raise ValueError(f"manifest row {row.get('id', '?')!r} lacks field {e}") from None


def dev_audio_items(subset: Optional[str] = None) -> List[DevItem]:
    """The transcribed recordings, in manifest order.

    Args:
      subset: ``"short"`` or ``"long"`` to filter; ``None`` for all.
    """
    base = dev_audio_dir()
    items = [_item(r, base) for r in _read_jsonl(base / "manifest.jsonl")]
    if subset is not None:
        known = {it.subset for it in items}
        if subset not in known:
            raise ValueError(f"unknown subset {subset!r}; manifest has {sorted(known)}")
        items = [it for it in items if it.subset == subset]
    return items


def untranscribed_items() -> List[DevItem]:
    """Recordings without a trusted reference (for latency, throughput, VAD and memory tests)."""
    base = dev_audio_dir()
    path = base / "untranscribed.jsonl"
    if not path.is_file():
        return []
    return [_item(r, base, subset="untranscribed") for r in _read_jsonl(path)]


def dev_item(item_id: str) -> DevItem:
    """Look one item up by id (transcribed or not)."""
    for it in dev_audio_items() + untranscribed_items():
        if it.id == item_id:
            return it
    raise KeyError(f"no dev-audio item {item_id!r}")
