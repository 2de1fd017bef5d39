"""The worker side of a job: load the model once, then read, transcribe and write item after item.

:class:`ItemTranscriber` is what every engine runs (the CLI process itself, each ``--workers``
process, each Ray actor), so outputs are the same wherever an item is processed. A file that
cannot be read (missing, corrupt, empty, not audio) or whose decoding raises becomes a ``failed``
record; the worker goes on with the next item.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.io import load_audio
from burble.asr.results import TranscriptionResult
from burble.batch.inputs import AudioItem
from burble.batch.job import ItemRecord, JobConfig
from burble.batch.outputs import write_outputs

if TYPE_CHECKING:  # the type only: importing the processors would load torch before the model does
    from burble.asr.fusion.phonetic import PhoneticMatcher
    from burble.asr.processors import ProcessorFactory

# (item id, audio seconds just finished): drives progress bars while a long file is decoded.
Tick = Callable[[str, float], None]


def read_item_audio(item: AudioItem) -> np.ndarray:
    """The item's samples (16 kHz mono), cut to ``start``/``duration`` for lhotse cuts.

    Raises:
      FileNotFoundError, AudioDecodeError: unreadable file.
      ValueError: the cut is outside the recording.
    """
    audio = load_audio(item.audio)
    if item.start or item.duration is not None:
        begin = int(round(item.start * SAMPLE_RATE))
        end = len(audio) if item.duration is None else begin + int(round(item.duration * SAMPLE_RATE))
        if begin >= len(audio) or end <= begin:
            raise ValueError(f"{item.audio}: cut {item.start:.2f}+{item.duration} s is outside the {len(audio) / SAMPLE_RATE:.2f} s recording")
        audio = audio[begin:end]
    return audio


class ItemTranscriber:
    """Loads the model of a :class:`JobConfig` and processes items into records.

    Args:
      config: the job configuration.
      threads: torch CPU threads for this worker (overrides ``config.threads`` when > 0).
    """

    def __init__(self, config: JobConfig, threads: int = 0) -> None:
        import burble

        self.config = config
        self.asr = burble.load_model(config.model, device=config.device, dtype=config.dtype, static_decode=config.static_decode, threads=(threads or config.threads) or None)
        # The job's biasing goes with every call: the model is shared and holds none of its own.
        self.biasing: Optional["ProcessorFactory"] = None
        self.phonetic: Optional["PhoneticMatcher"] = None  # hotwords' post-search correction
        if config.biasing is not None and getattr(config.biasing, "enabled", False):
            from burble.asr.fusion.config import phonetic_matcher, processor_factory

            self.biasing = processor_factory(config.biasing, self.asr.tokenizer)
            self.phonetic = phonetic_matcher(config.biasing, self.asr.tokenizer)
        self.batched = None
        if config.batch is not None:
            from burble.batch.batched import BatchedTranscriber

            self.batched = BatchedTranscriber(self.asr, config.options, config.batch, extra_processors=self.biasing)

    def run(self, items: Iterable[AudioItem], tick: Optional[Tick] = None) -> Iterator[ItemRecord]:
        """Process ``items`` (pulled lazily) and yield one record per item, as each finishes."""
        if self.batched is None:
            for item in items:
                yield self._long_form(item, tick)
        else:
            yield from self._batched(items, tick)

    def _finish(self, item: AudioItem, result: TranscriptionResult, started: float) -> ItemRecord:
        if self.phonetic is not None:
            from burble.asr.fusion.phonetic import correct_result

            result = correct_result(result, self.phonetic)
        try:
            paths = write_outputs(result, self.config.output_dir, item.id, self.config.formats)
        except OSError as error:
            return ItemRecord.failure(item, error, result.duration, time.perf_counter() - started)
        return ItemRecord(
            id=item.id, audio=item.audio, status="ok", duration=result.duration,
            seconds=time.perf_counter() - started, outputs=[str(p) for p in paths], text=result.text,
        )

    def _long_form(self, item: AudioItem, tick: Optional[Tick]) -> ItemRecord:
        started = time.perf_counter()
        duration = 0.0
        try:
            audio = read_item_audio(item)
            duration = len(audio) / SAMPLE_RATE
            progress = (lambda seconds: tick(item.id, seconds)) if tick else None
            result = self.asr.transcribe(audio, self.config.options, progress=progress, extra_processors=self.biasing)
        except Exception as error:  # reported per item, never fatal to the job
            return ItemRecord.failure(item, error, duration, time.perf_counter() - started)
        return self._finish(item, result, started)

    def _batched(self, items: Iterable[AudioItem], tick: Optional[Tick]) -> Iterator[ItemRecord]:
        assert self.batched is not None
        unreadable: deque[ItemRecord] = deque()
        started: dict[str, float] = {}

        def feed() -> Iterator[tuple[AudioItem, np.ndarray]]:
            for item in items:
                started[item.id] = time.perf_counter()
                try:
                    audio = read_item_audio(item)
                except Exception as error:
                    unreadable.append(ItemRecord.failure(item, error, 0.0, time.perf_counter() - started.pop(item.id)))
                    continue
                yield item, audio

        for item, result in self.batched.transcribe_many(feed()):
            while unreadable:
                yield unreadable.popleft()
            begun = started.pop(item.id)
            if isinstance(result, BaseException):
                yield ItemRecord.failure(item, result, 0.0, time.perf_counter() - begun)
                continue
            if tick:
                tick(item.id, result.duration)
            yield self._finish(item, result, begun)
        while unreadable:
            yield unreadable.popleft()
