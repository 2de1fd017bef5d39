"""The Ray engine: the same job on Ray Data, so a user with a Ray cluster scales out unchanged.

Items become a ``ray.data`` dataset (``from_items``); ``map_batches`` runs :class:`RayTranscriber`
- a callable class, so Ray keeps a pool (``ActorPoolStrategy``) of ``workers`` actors, each
holding one loaded model and reserving ``threads`` CPUs - over batches of items. Every actor runs the same
:class:`~burble.batch.worker.ItemTranscriber` as the local engine and writes outputs itself, so the
output folder must be reachable from every node (a shared filesystem on a cluster; any folder on
one machine). The driver streams the records back for progress, errors and the summary.

Ray is optional (``pip install 'burble[ray]'``). ``address`` connects to a running cluster (or set
``RAY_ADDRESS``); without one a local Ray instance is started with as many CPUs as the job needs.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Optional, Sequence

import numpy as np

from burble.batch.inputs import AudioItem
from burble.batch.job import ItemRecord, JobConfig

OnRecord = Callable[[ItemRecord], None]


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("the ray engine needs Ray Data: pip install 'burble[ray]' (or 'ray[data]')") from error
    return ray


class RayTranscriber:
    """A Ray Data actor: loads the model once, then transcribes batches of items.

    Args:
      config: the job configuration.
      threads: torch CPU threads of this actor (the CPUs it reserved).
    """

    def __init__(self, config: JobConfig, threads: int = 1) -> None:
        from burble.batch.worker import ItemTranscriber

        self.transcriber = ItemTranscriber(config, threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        items = [AudioItem.from_dict(json.loads(row)) for row in batch["item"]]
        records = [json.dumps(record.to_dict(), ensure_ascii=False) for record in self.transcriber.run(items)]
        return {"record": np.array(records, dtype=object)}


def run_ray(
    items: Sequence[AudioItem],
    config: JobConfig,
    on_record: OnRecord,
    *,
    workers: int = 1,
    threads: int = 1,
    items_per_call: int = 1,
    address: Optional[str] = None,
) -> None:
    """Transcribe ``items`` on Ray Data and report each record through ``on_record``.

    Args:
      items: what to transcribe.
      config: the job configuration (pickled to the actors).
      workers: actors (model copies).
      threads: CPUs reserved by, and torch threads of, each actor.
      items_per_call: items per ``map_batches`` batch (with batched decoding, windows of these
        items share encoder/decoder batches).
      address: Ray cluster address (default ``RAY_ADDRESS`` or a new local instance).
    """
    if not items:
        return
    ray = _import_ray()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers * threads, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # burble draws its own
    dataset = ray.data.from_items([{"item": json.dumps(item.to_dict(), ensure_ascii=False)} for item in items])
    actors = max(1, min(workers, len(items)))
    try:  # Ray >= 2.51 sizes the actor pool with ``compute``; older versions with ``concurrency``
        pool = {"compute": ray.data.ActorPoolStrategy(size=actors)}
    except TypeError:  # pragma: no cover - older Ray
        pool = {"concurrency": actors}
    dataset = dataset.map_batches(
        RayTranscriber,
        fn_constructor_kwargs={"config": config, "threads": threads},
        batch_size=max(1, items_per_call),
        batch_format="numpy",
        num_cpus=threads,
        **pool,
    )
    for row in dataset.iter_rows():
        on_record(ItemRecord.from_dict(json.loads(row["record"])))
