"""A transcription job: its configuration, per-item records, planning (``--resume``) and summary.

The same :class:`JobConfig` drives every engine (in-process, worker processes, Ray actors), and
every engine reports one :class:`ItemRecord` per item, so the outputs and the summary do not
depend on where the work ran.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from burble.asr.options import TranscribeOptions
from burble.batch.batched import BatchOptions
from burble.batch.inputs import AudioItem
from burble.batch.outputs import atomic_write_text, is_complete, output_paths
from burble.cpu_threads import worker_threads  # noqa: F401  (burble.batch.job.worker_threads: the older import path)


@dataclass(frozen=True)
class JobConfig:
    """Everything a worker needs to transcribe items and write their outputs.

    Attributes:
      output_dir: where ``<id>.<fmt>`` files go.
      formats: output formats (``txt``, ``srt``, ``vtt``, ``json``).
      model: checkpoint name or path (see :func:`burble.load_model`).
      device: torch device.
      dtype: precision name (``float32``, ``float16``, ``bfloat16``; see :mod:`burble.precision`).
      static_decode: decoder steps at static shapes, in CUDA graphs on a GPU (``--cuda-graphs``).
      threads: torch CPU threads per worker (0: automatic, see :func:`burble.cpu_threads.worker_threads`).
      options: decoding options.
      batch: batched-window decoding; ``None`` decodes each file long-form (one window at a time,
        each prompted with the previous text).
      biasing: shallow fusion / phrase boosting (a ``BiasingConfig``), or ``None``.
    """

    output_dir: str
    formats: tuple[str, ...] = ("txt",)
    model: str = "tiny.en"
    device: str = "cpu"
    dtype: str = "float32"
    static_decode: bool = False
    threads: int = 0
    options: TranscribeOptions = field(default_factory=TranscribeOptions)
    batch: Optional[BatchOptions] = None
    biasing: Optional[object] = None


@dataclass
class ItemRecord:
    """What happened to one item.

    Attributes:
      id, audio: the item.
      status: ``ok``, ``failed`` or ``skipped`` (complete outputs already existed).
      duration: audio seconds (0 when the audio could not be read).
      seconds: wall time from reading the audio to the last output written (latency).
      error_type, error: for failures: the exception type and message.
      outputs: written paths.
      text: the transcript (``ok`` only).
    """

    id: str
    audio: str
    status: str
    duration: float = 0.0
    seconds: float = 0.0
    error_type: Optional[str] = None
    error: Optional[str] = None
    outputs: list[str] = field(default_factory=list)
    text: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ItemRecord":
        return cls(**data)

    @classmethod
    def failure(cls, item: AudioItem, error: BaseException, duration: float = 0.0, seconds: float = 0.0) -> "ItemRecord":
        return cls(id=item.id, audio=item.audio, status="failed", duration=duration, seconds=seconds,
                   error_type=type(error).__name__, error=str(error) or repr(error))


def plan(items: Sequence[AudioItem], config: JobConfig, *, resume: bool) -> tuple[list[AudioItem], list[ItemRecord]]:
    """Split items into those to transcribe and those skipped because their outputs are complete."""
    if not resume:
        return list(items), []
    todo, skipped = [], []
    for item in items:
        if is_complete(config.output_dir, item.id, config.formats):
            paths = output_paths(config.output_dir, item.id, config.formats)
            skipped.append(ItemRecord(id=item.id, audio=item.audio, status="skipped", outputs=[str(p) for p in paths]))
        else:
            todo.append(item)
    return todo, skipped


def audio_duration(item: AudioItem) -> float:
    """Seconds of audio the item covers, from the file header (0 if unreadable)."""
    if item.duration is not None:
        return float(item.duration)
    try:
        import soundfile as sf

        info = sf.info(item.audio)
        return max(0.0, info.frames / info.samplerate - item.start)
    except Exception:  # unreadable: the worker will report why
        return 0.0


@dataclass
class JobSummary:
    """Totals of a job (printed at the end, written with ``--summary-file``)."""

    files: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    engine: str = "local"
    workers: int = 1
    batch_size: Optional[int] = None
    started_at: float = field(default_factory=time.time)

    def add(self, record: ItemRecord) -> None:
        self.files += 1
        if record.status == "ok":
            self.ok += 1
            self.audio_seconds += record.duration
        elif record.status == "failed":
            self.failed += 1
        else:
            self.skipped += 1

    @property
    def rtf(self) -> float:
        """Wall seconds per audio second of the transcribed items (lower is faster)."""
        return self.wall_seconds / self.audio_seconds if self.audio_seconds else float("nan")

    @property
    def speed(self) -> float:
        """Audio hours per wall-clock hour (= audio seconds per second)."""
        return self.audio_seconds / self.wall_seconds if self.wall_seconds else float("nan")

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(rtf=self.rtf, audio_hours=self.audio_seconds / 3600, audio_hours_per_hour=self.speed)
        return data

    def format(self) -> str:
        return (
            f"files: {self.ok} ok, {self.failed} failed, {self.skipped} skipped (of {self.files}); "
            f"audio {self.audio_seconds / 3600:.3f} h in {self.wall_seconds:.1f} s wall; "
            f"RTF {self.rtf:.3f} ({self.speed:.1f} audio h/h)"
        )

    def write(self, path: str | Path) -> None:
        atomic_write_text(Path(path), json.dumps(self.to_dict(), indent=2) + "\n")


class RecordLog:
    """Appends records to a JSONL file as they happen (a crash keeps what was logged).

    Args:
      path: the JSONL file; ``None`` logs nothing.
      statuses: which records to keep (``("failed",)`` for an errors file).
      fields: which record fields to write (default: all).
      append: keep earlier lines (a resumed run adds to the log of the runs before it).
    """

    def __init__(
        self,
        path: Optional[str | Path],
        statuses: Sequence[str] = ("ok", "failed", "skipped"),
        fields: Optional[Sequence[str]] = None,
        *,
        append: bool = False,
    ) -> None:
        self.path = Path(path) if path else None
        self.statuses = tuple(statuses)
        self.fields = tuple(fields) if fields else None
        self._file = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a" if append else "w", encoding="utf-8")

    def add(self, record: ItemRecord) -> None:
        if self._file is not None and record.status in self.statuses:
            row = record.to_dict()
            if self.fields:
                row = {k: row[k] for k in self.fields}
            self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


ERROR_FIELDS = ("id", "audio", "status", "duration", "seconds", "error_type", "error")


def read_records(path: str | Path) -> list[dict]:
    """The rows of a records or errors JSONL file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
