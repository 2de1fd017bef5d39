"""Transcription results and their serialisations (txt, srt, vtt, json)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

from burble.decoding.stats import SpeculativeStats


@dataclass
class Word:
    word: str
    start: float
    end: float
    probability: float


@dataclass
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: Optional[list[Word]] = None


@dataclass
class TranscriptionResult:
    """Segments of one audio input plus decoding statistics."""

    segments: list[Segment]
    duration: float
    language: Optional[str] = None
    stats: SpeculativeStats = field(default_factory=SpeculativeStats)
    encoder_seconds: float = 0.0

    @property
    def text(self) -> str:
        return "".join(segment.text for segment in self.segments).strip()

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "language": self.language,
            "duration": self.duration,
            "segments": [asdict(segment) for segment in self.segments],
            "stats": self.stats.as_dict(),
        }


def format_timestamp(seconds: float, *, always_hours: bool = False, decimal: str = ".") -> str:
    milliseconds = max(0, round(seconds * 1000.0))
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    secs, milliseconds = divmod(milliseconds, 1000)
    hours_part = f"{hours:02d}:" if always_hours or hours > 0 else ""
    return f"{hours_part}{minutes:02d}:{secs:02d}{decimal}{milliseconds:03d}"


def to_txt(result: TranscriptionResult) -> str:
    return "".join(segment.text.strip() + "\n" for segment in result.segments)


def to_srt(result: TranscriptionResult) -> str:
    blocks = []
    for i, segment in enumerate(result.segments, start=1):
        start = format_timestamp(segment.start, always_hours=True, decimal=",")
        end = format_timestamp(segment.end, always_hours=True, decimal=",")
        blocks.append(f"{i}\n{start} --> {end}\n{segment.text.strip()}\n")
    return "\n".join(blocks)


def to_vtt(result: TranscriptionResult) -> str:
    lines = ["WEBVTT", ""]
    for segment in result.segments:
        lines.append(f"{format_timestamp(segment.start)} --> {format_timestamp(segment.end)}")
        lines.append(segment.text.strip())
        lines.append("")
    return "\n".join(lines)


def to_json(result: TranscriptionResult) -> str:
    return json.dumps(result.to_dict(), ensure_ascii=False, indent=2)


WRITERS = {"txt": to_txt, "srt": to_srt, "vtt": to_vtt, "json": to_json}
