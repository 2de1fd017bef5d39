"""Run a transcription job end to end: plan, progress, engine, error log, summary.

:func:`run_job` is what ``burble transcribe`` calls and what Python users call directly::

    from burble.batch import JobConfig, RunOptions, collect_inputs, run_job
    items = collect_inputs(["data/manifest.jsonl"])
    summary = run_job(items, JobConfig(output_dir="out", formats=("json",)), RunOptions(resume=True))
    print(summary.format())
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from burble.batch.inputs import AudioItem
from burble.batch.job import ERROR_FIELDS, ItemRecord, JobConfig, JobSummary, RecordLog, plan
from burble.batch.outputs import remove_stale_temporaries
from burble.batch.progress import JobProgress
from burble.cpu_threads import worker_threads

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class RunOptions:
    """How a job runs (not what it computes: that is :class:`JobConfig`).

    Attributes:
      engine: ``local`` (this process or worker processes) or ``ray``.
      workers: model copies working in parallel (processes or Ray actors).
      resume: skip items whose outputs are complete.
      progress: show progress on stderr (a bar on a terminal, else a plain line every few seconds).
      errors_file: JSONL of failed items (written as they fail).
      records_file: JSONL of every item's record (status, audio seconds, latency, text);
        appended to when resuming, so it keeps the history of the interrupted runs.
      summary_file: JSON summary at the end.
      ray_address: a Ray cluster to connect to.
    """

    engine: str = "local"
    workers: int = 1
    resume: bool = False
    progress: bool = True
    errors_file: Optional[str] = None
    records_file: Optional[str] = None
    summary_file: Optional[str] = None
    ray_address: Optional[str] = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, not {self.engine!r}")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")


def run_job(
    items: Sequence[AudioItem],
    config: JobConfig,
    run: RunOptions = RunOptions(),
    *,
    on_record: Optional[Callable[[ItemRecord], None]] = None,
) -> JobSummary:
    """Transcribe ``items`` into ``config.output_dir`` and return the summary.

    Args:
      items: what to transcribe (see :func:`burble.batch.inputs.collect_inputs`).
      config: what to compute and write.
      run: engine, workers, resume, progress, error/summary files.
      on_record: called with every record (skipped ones included), e.g. to print transcripts.
    """
    started = time.perf_counter()
    batch_size = config.batch.batch_size if config.batch is not None else None
    summary = JobSummary(engine=run.engine, workers=run.workers, batch_size=batch_size)
    remove_stale_temporaries(config.output_dir)
    todo, skipped = plan(items, config, resume=run.resume)
    errors = RecordLog(run.errors_file, ("failed",), ERROR_FIELDS)
    records = RecordLog(run.records_file, append=run.resume)
    progress = JobProgress(todo, run.progress)

    def handle(record: ItemRecord) -> None:
        summary.add(record)
        errors.add(record)
        records.add(record)
        progress.record(record)
        if on_record is not None:
            on_record(record)

    try:
        for record in skipped:
            summary.add(record)
            records.add(record)
            if on_record is not None:
                on_record(record)
        # The cores are shared among the workers that compute at once: the local engine starts no
        # more workers than there are items (one item runs here, with all the cores).
        parallel = run.workers if run.engine == "ray" else max(1, min(run.workers, len(todo)))
        threads = worker_threads(parallel, config.threads)
        if run.engine == "ray":
            from burble.batch.ray_engine import run_ray

            run_ray(todo, config, handle, workers=run.workers, threads=threads,
                    items_per_call=batch_size or 1, address=run.ray_address)
        elif run.workers > 1 and len(todo) > 1:
            from burble.batch.local import run_workers

            run_workers(todo, config, handle, progress.tick, workers=run.workers, threads=threads)
        elif todo:
            from burble.batch.local import run_in_process

            run_in_process(todo, config, handle, progress.tick, threads=threads)
    finally:
        progress.close()
        errors.close()
        records.close()
        summary.wall_seconds = time.perf_counter() - started
        if run.summary_file:
            summary.write(run.summary_file)
    return summary
