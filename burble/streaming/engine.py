"""The compute engine: the few worker threads that run every recognizer call of a process.

Streams do not own threads. Each stream gets a :class:`Lane` of one shared :class:`ComputeEngine`
and submits its recognizer calls there; the engine's ``workers`` threads (the server: one per
core, each with its share of torch's threads; ``burble stream`` and ``listen``: one) are the only
threads that ever run the model. That decides three things a thread per stream got wrong:

- **memory**: torch, MKL and oneDNN keep scratch buffers per thread that runs them; with a
  thread per stream the server grew by ~150 MB per added 30 s stream, with the pool (and one
  shared VAD session) by ~65-90 MB (``benchmarks/server_load.py``);
- **fairness**: ready lanes are served round-robin, one call each, so a stream with a backlog
  (a client that sent minutes of audio at once) never starves a live one; a semaphore wakes
  waiters in no particular order;
- **cancellation**: closing a lane drops its queued calls at once, so a vanished client's work
  never occupies a worker.

A lane's calls run one at a time and in order (a recognizer is a stateful stream), on whichever
worker is free. Each call's queue wait is measured: ``wait_seconds`` is the engine's lag as this
stream sees it. Cross-stream batching (rows of many lanes in one decoder step) is the next step
of the engine: a worker would take the ready calls of several lanes at once.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class _Task:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future
    submitted: float = field(default_factory=time.perf_counter)


class Lane:
    """One stream's queue of calls in a :class:`ComputeEngine` (make it with :meth:`ComputeEngine.lane`).

    Attributes:
      calls: calls completed.
      busy_seconds: wall time spent running this lane's calls.
      wait_seconds: queue wait of the last call that started (the engine's lag for this stream).
      max_wait_seconds: the longest queue wait so far.
    """

    def __init__(self, engine: "ComputeEngine") -> None:
        self._engine = engine
        self._tasks: collections.deque[_Task] = collections.deque()
        self._running = False
        self.closed = False
        self.calls = 0
        self.busy_seconds = 0.0
        self.wait_seconds = 0.0
        self.max_wait_seconds = 0.0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue ``fn(*args)``; the future has its result (or exception)."""
        return self._engine._submit(self, fn, args)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on a worker and await its result."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        """Drop every queued call (their futures are cancelled); a running call finishes on its own."""
        self._engine._close_lane(self)


class ComputeEngine:
    """A fixed pool of worker threads serving lanes round-robin.

    Args:
      workers: threads that run calls at once (the cap on concurrent recognizer calls).
      name: thread name prefix.
    """

    def __init__(self, workers: int = 1, *, name: str = "burble-engine") -> None:
        if workers < 1:
            raise ValueError("an engine needs at least one worker")
        self.workers = workers
        self._name = name
        self._lock = threading.Condition()
        self._ready: collections.deque[Lane] = collections.deque()  # lanes with work, none running
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._queued = 0
        self.running = 0

    def lane(self) -> Lane:
        """A new stream's lane."""
        return Lane(self)

    @property
    def waiting(self) -> int:
        """Calls queued, not yet running (all lanes)."""
        return self._queued

    def close(self) -> None:
        """Stop the workers once their current calls end; queued calls are cancelled."""
        with self._lock:
            self._closed = True
            for lane in self._ready:
                self._queued -= _cancel_all(lane)
            self._ready.clear()
            self._lock.notify_all()

    # -- internals ---------------------------------------------------------------------------

    def _submit(self, lane: Lane, fn: Callable[..., Any], args: tuple[Any, ...]) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed or lane.closed:
                future.cancel()
                return future
            lane._tasks.append(_Task(fn, args, future))
            self._queued += 1
            if not lane._running and len(lane._tasks) == 1:
                self._ready.append(lane)
            self._start_workers()
            self._lock.notify()
        return future

    def _close_lane(self, lane: Lane) -> None:
        with self._lock:
            lane.closed = True
            self._queued -= _cancel_all(lane)
            if lane in self._ready:
                self._ready.remove(lane)

    def _start_workers(self) -> None:
        # Lazily, so an engine that is never used costs no threads (called with the lock held).
        while len(self._threads) < self.workers:
            thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._ready and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                lane = self._ready.popleft()
                task = lane._tasks.popleft()
                self._queued -= 1
                lane._running = True
                self.running += 1
            started = time.perf_counter()
            lane.wait_seconds = started - task.submitted
            lane.max_wait_seconds = max(lane.max_wait_seconds, lane.wait_seconds)
            if task.future.set_running_or_notify_cancel():
                try:
                    task.future.set_result(task.fn(*task.args))
                except BaseException as error:  # the caller gets it, the worker lives on
                    task.future.set_exception(error)
            # An idle worker must not hold its last call: its arguments (a recognizer's bound
            # method, a chunk) would keep a finished stream's state alive until the next call.
            del task
            lane.busy_seconds += time.perf_counter() - started
            lane.calls += 1
            with self._lock:
                lane._running = False
                self.running -= 1
                if lane._tasks and not lane.closed:
                    self._ready.append(lane)  # to the back: the other lanes go first
                    self._lock.notify()


def _cancel_all(lane: Lane) -> int:
    """Cancel a lane's queued calls; returns how many there were."""
    count = len(lane._tasks)
    while lane._tasks:
        lane._tasks.popleft().future.cancel()
    return count


_default: Optional[ComputeEngine] = None
_default_lock = threading.Lock()


def default_engine() -> ComputeEngine:
    """The process's one-worker engine, for pipelines that were given none (``burble stream``, ``listen``)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ComputeEngine(1)
        return _default
