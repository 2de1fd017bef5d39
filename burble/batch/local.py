"""The local engine: items processed in this process, or by ``--workers`` processes on this machine.

Each worker process loads the model once (with ``threads`` torch threads, so that
``workers * threads`` stays within the cores) and pulls items from a shared queue, so fast
workers take more. Workers write their items' outputs themselves and send back records. If a
worker process dies (killed, out of memory), the items it had taken are reported as failed and
the others carry on; a worker that cannot load the model stops the job with that error.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import signal
import sys
from typing import Callable, Iterator, Optional, Sequence

from burble.batch.inputs import AudioItem
from burble.batch.job import ItemRecord, JobConfig
from burble.batch.worker import ItemTranscriber, Tick

OnRecord = Callable[[ItemRecord], None]


class WorkerStartError(RuntimeError):
    """A worker could not start (e.g. the model failed to load)."""


def run_in_process(items: Sequence[AudioItem], config: JobConfig, on_record: OnRecord, on_tick: Optional[Tick] = None, threads: int = 0) -> None:
    """Process ``items`` here, one after another (batched decoding still batches across them)."""
    transcriber = ItemTranscriber(config, threads)
    for record in transcriber.run(items, on_tick):
        on_record(record)


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker when the parent dies (even by SIGKILL), so an
    interrupted job leaves no orphan writing outputs behind it."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - no libc: rely on the parent check in pull()
            pass


def _worker_main(config: JobConfig, threads: int, tasks, results, index: int, parent: int) -> None:
    _die_with_parent()
    try:
        transcriber = ItemTranscriber(config, threads)
    except BaseException as error:  # reported to the parent, which stops the job
        results.put(("fatal", index, f"{type(error).__name__}: {error}"))
        return

    def pull() -> Iterator[AudioItem]:
        while True:
            row = tasks.get()
            if row is None or os.getppid() != parent:
                return
            results.put(("pulled", index, row["id"]))
            yield AudioItem.from_dict(row)

    def tick(item_id: str, seconds: float) -> None:
        results.put(("tick", index, (item_id, seconds)))

    for record in transcriber.run(pull(), tick):
        results.put(("record", index, record.to_dict()))
    results.put(("exit", index, None))


def run_workers(
    items: Sequence[AudioItem],
    config: JobConfig,
    on_record: OnRecord,
    on_tick: Optional[Tick] = None,
    *,
    workers: int = 2,
    threads: int = 1,
    poll_seconds: float = 1.0,
) -> None:
    """Process ``items`` with ``workers`` processes (spawned: no state shared with this one)."""
    if not items:
        return
    context = mp.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    for item in items:
        tasks.put(item.to_dict())
    workers = max(1, min(workers, len(items)))
    for _ in range(workers):
        tasks.put(None)
    processes = [
        context.Process(target=_worker_main, args=(config, threads, tasks, results, i, os.getpid()), daemon=True, name=f"burble-worker-{i}")
        for i in range(workers)
    ]
    outstanding = {item.id: item for item in items}
    held: list[set[str]] = [set() for _ in range(workers)]
    gone: set[int] = set()
    try:
        for process in processes:
            process.start()
        while outstanding:
            try:
                kind, index, payload = results.get(timeout=poll_seconds)
            except queue_module.Empty:
                _reap(processes, held, gone, outstanding, on_record)
                if len(gone) == workers and outstanding:
                    for item_id in list(outstanding):
                        on_record(ItemRecord.failure(outstanding.pop(item_id), RuntimeError("no worker left to process this item")))
                continue
            if kind == "fatal":
                raise WorkerStartError(f"worker {index} could not start: {payload}")
            if kind == "pulled":
                held[index].add(payload)
            elif kind == "tick":
                if on_tick is not None:
                    on_tick(*payload)
            elif kind == "record":
                record = ItemRecord.from_dict(payload)
                held[index].discard(record.id)
                if outstanding.pop(record.id, None) is not None:
                    on_record(record)
            elif kind == "exit":
                gone.add(index)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=10)
        tasks.cancel_join_thread()
        results.cancel_join_thread()


def _reap(processes, held: list[set[str]], gone: set[int], outstanding: dict, on_record: OnRecord) -> None:
    """Report the items of workers that died without finishing them."""
    for index, process in enumerate(processes):
        if index in gone or process.is_alive():
            continue
        gone.add(index)
        for item_id in sorted(held[index]):
            item = outstanding.pop(item_id, None)
            if item is not None:
                on_record(ItemRecord.failure(item, RuntimeError(f"worker {index} died (exit code {process.exitcode}) while processing it")))
        held[index].clear()
