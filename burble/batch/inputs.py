"""What a batch job transcribes: files, folders, globs and manifests turned into :class:`AudioItem` s.

Inputs may be mixed on one command line:

* an audio file (any extension) is one item named after its stem;
* a folder is searched recursively for audio extensions; items are named by their path inside the
  folder without extension (``sub/clip``), so outputs mirror the folder and never collide;
* a glob (``data/**/*.flac``) expands like a list of files;
* a manifest (``*.jsonl``, ``*.jsonl.gz``): one JSON object per line, either burble's own
  ``{"audio": PATH, "text": optional reference, "id": optional name}`` or lhotse's
  ``RecordingSet`` (``{"id", "sources": [{"type": "file", "source": PATH}], ...}``) or ``CutSet``
  rows (``{"id", "start", "duration", "recording": {...}, "supervisions": [{"text"}]}``). Relative
  audio paths are resolved against the manifest's folder.

Bad manifests raise :class:`ManifestError` naming the file, the line and what is wrong.
Collecting reads no audio (not even headers): on a folder of a million files the first transcript
must not wait for a serial probe of each; lengths for progress are read on a background thread
(:mod:`burble.batch.progress`) and errors are reported per item by the worker.
"""

from __future__ import annotations

import glob
import gzip
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, Optional, Sequence

AUDIO_EXTENSIONS = frozenset({".wav", ".flac", ".mp3", ".ogg", ".opus", ".oga", ".m4a", ".aiff", ".aif", ".au", ".w64", ".caf", ".sph"})
MANIFEST_SUFFIXES = (".jsonl", ".jsonl.gz")


class InputError(ValueError):
    """The job's inputs are unusable as given (a glob matching nothing, two inputs with one name)."""


class ManifestError(InputError):
    """A manifest line is not usable (bad JSON, a missing field, an unsafe id)."""


@dataclass(frozen=True)
class AudioItem:
    """One recording (or one lhotse cut of it) to transcribe.

    Attributes:
      id: output name, a relative POSIX path without extension (``clip`` or ``sub/clip``).
      audio: path of the audio file.
      text: reference transcript if the manifest has one.
      start: offset in seconds into the file (lhotse cuts); 0 for whole files.
      duration: seconds to read from ``start`` (``None``: to the end of the file).
    """

    id: str
    audio: str
    text: Optional[str] = None
    start: float = 0.0
    duration: Optional[float] = None

    def to_dict(self) -> dict:
        return {"id": self.id, "audio": self.audio, "text": self.text, "start": self.start, "duration": self.duration}

    @classmethod
    def from_dict(cls, row: dict) -> "AudioItem":
        return cls(id=row["id"], audio=row["audio"], text=row.get("text"), start=float(row.get("start") or 0.0),
                   duration=row.get("duration"))


def is_manifest(path: str | Path) -> bool:
    return str(path).endswith(MANIFEST_SUFFIXES)


def check_item_id(item_id: str, where: str = "") -> str:
    """An id must be usable as a relative output path: no ``..``, not absolute, not empty."""
    if not isinstance(item_id, str) or not item_id.strip():
        raise ManifestError(f"{where}id must be a non-empty string, got {item_id!r}")
    posix = PurePosixPath(item_id.replace("\\", "/"))
    if posix.is_absolute() or ".." in posix.parts or any(part in ("", ".") for part in item_id.split("/")):
        raise ManifestError(f"{where}id {item_id!r} must be a plain relative name (no '..', no leading '/')")
    return str(posix)


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _lhotse_source(recording: dict, where: str) -> str:
    sources = recording.get("sources")
    if not isinstance(sources, list) or not sources:
        raise ManifestError(f"{where}lhotse recording has no 'sources'")
    source = sources[0]
    if source.get("type") != "file":
        raise ManifestError(f"{where}only lhotse sources of type 'file' are supported, got {source.get('type')!r}")
    if len(source.get("channels", [0])) > 1 or len(sources) > 1:
        pass  # multi-channel: load_audio averages channels, which is what a mono recogniser wants
    return str(source["source"])


def parse_manifest_row(row: object, base: Path, where: str = "") -> AudioItem:
    """One manifest line (already JSON-decoded) as an :class:`AudioItem`.

    Args:
      row: the decoded JSON value.
      base: folder that relative audio paths are relative to.
      where: ``"file:line: "`` prefix for error messages.
    """
    if not isinstance(row, dict):
        raise ManifestError(f"{where}expected a JSON object, got {type(row).__name__}")

    def resolve(audio: object) -> str:
        if not isinstance(audio, str) or not audio:
            raise ManifestError(f"{where}'audio' must be a path string, got {audio!r}")
        path = Path(audio).expanduser()
        return str(path if path.is_absolute() else (base / path))

    if "audio" in row:  # burble's own format
        audio = resolve(row["audio"])
        item_id = row.get("id", Path(audio).stem)
        text = row.get("text")
        if text is not None and not isinstance(text, str):
            raise ManifestError(f"{where}'text' must be a string, got {type(text).__name__}")
        return AudioItem(id=check_item_id(item_id, where), audio=audio, text=text)
    if "recording" in row:  # lhotse cut
        recording = row["recording"]
        if not isinstance(recording, dict):
            raise ManifestError(f"{where}lhotse cut 'recording' must be an object")
        audio = resolve(_lhotse_source(recording, where))
        texts = [s.get("text") for s in row.get("supervisions", []) if isinstance(s, dict) and s.get("text")]
        try:
            start, duration = float(row.get("start", 0.0)), float(row["duration"])
        except (KeyError, TypeError, ValueError):
            raise ManifestError(f"{where}lhotse cut needs numeric 'start' and 'duration'") from None
        return AudioItem(id=check_item_id(row.get("id", Path(audio).stem), where), audio=audio,
                         text=" ".join(texts) if texts else None, start=start, duration=duration)
    if "sources" in row:  # lhotse recording
        audio = resolve(_lhotse_source(row, where))
        return AudioItem(id=check_item_id(row.get("id", Path(audio).stem), where), audio=audio)
    raise ManifestError(
        f"{where}no 'audio' field (burble manifest: {{\"audio\": PATH, \"text\": ..., \"id\": ...}}; "
        f"lhotse: a recording with 'sources' or a cut with 'recording'); keys are {sorted(row)}"
    )


def read_manifest(path: str | Path) -> list[AudioItem]:
    """All items of a JSONL manifest (blank lines and ``#`` comments are skipped)."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"{path}: manifest not found")
    items = []
    base = path.resolve().parent
    with _open_text(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{number}: "
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ManifestError(f"{where}not valid JSON ({error.msg} at column {error.colno})") from None
            items.append(parse_manifest_row(row, base, where))
    if not items:
        raise ManifestError(f"{path}: the manifest holds no items")
    return items


def scan_folder(folder: Path, extensions: Iterable[str] = AUDIO_EXTENSIONS) -> list[AudioItem]:
    """Audio files under ``folder`` (recursively, sorted), named by their relative path."""
    wanted = {e.lower() for e in extensions}
    items = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix.lower() in wanted and not path.name.startswith("."):
            relative = path.relative_to(folder).with_suffix("")
            items.append(AudioItem(id=relative.as_posix(), audio=str(path)))
    return items


def _expand(spec: str) -> Iterator[AudioItem]:
    path = Path(spec).expanduser()
    if is_manifest(spec) and not glob.has_magic(spec):
        yield from read_manifest(path)
    elif path.is_dir():
        yield from scan_folder(path)
    elif glob.has_magic(spec):
        matches = sorted(glob.glob(str(path), recursive=True))
        if not matches:
            raise InputError(f"{spec}: no files match this pattern")
        for match in matches:
            yield from _expand(match) if Path(match).is_dir() or is_manifest(match) else [AudioItem(Path(match).stem, match)]
    else:
        # A plain file, existing or not: a missing file becomes a per-item error, not a crash.
        yield AudioItem(id=path.stem or path.name, audio=str(path))


def collect_inputs(specs: Sequence[str]) -> list[AudioItem]:
    """Turn command-line inputs (files, folders, globs, manifests) into items with unique ids.

    Raises:
      ManifestError: a manifest is malformed.
      InputError: a glob matches nothing, or two different inputs would write the same outputs.
    """
    items: list[AudioItem] = []
    seen: dict[str, str] = {}
    for spec in specs:
        for item in _expand(spec):
            if seen.get(item.id) == item.audio and item.start == 0 and item.duration is None:
                continue  # the same file given twice (e.g. by a folder and a glob)
            if item.id in seen:
                raise InputError(
                    f"two inputs map to the same output name {item.id!r}: {seen[item.id]} and {item.audio} "
                    "(give them distinct ids in a manifest, or pass their folder)"
                )
            seen[item.id] = item.audio
            items.append(item)
    return items
