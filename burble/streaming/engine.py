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
stream sees it.

**Cross-stream batching.** A call submitted with :meth:`Lane.submit_steps` is a generator of
*steps* (a recognizer's :meth:`~burble.streaming.recognizer.WhisperStreamingRecognizer.accept_steps`
yields the window it wants decoded and is sent the result). A worker that takes such a call also
takes the other ready lanes whose next call is one (up to ``max_batch``), runs them side by side
(:func:`run_together`): each runs up to its step (its own audio, encoder and commit work), then
the steps that share a ``batch_key`` (one model) run as the rows of one ``run_batch`` call (one
decoder pass for all of them per token), and each call goes on with its result. The batch is
whatever is ready when a worker comes free: a lightly loaded engine decodes at batch 1 with no
wait, a busy one in batches as large as its backlog, which is when rows pay (a decoder pass at
8 rows costs ~2x one row). ``batch_sizes`` counts the batches run.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Hashable, Optional, Protocol, Sequence


class BatchStep(Protocol):
    """What a call run in steps yields: work that may share one ``run_batch`` call with the steps of
    other calls that have the same ``batch_key``."""

    @property
    def batch_key(self) -> Hashable: ...

    @staticmethod
    def run_batch(steps: Sequence[Any]) -> list[Any]:
        """One result per step, in order."""
        ...


Steps = Generator[BatchStep, Any, Any]


@dataclass
class _Task:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future
    steps: bool = False  # fn returns a generator of BatchSteps (see Lane.submit_steps)
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
        return self._engine._submit(self, _Task(fn, args, Future()))

    def submit_steps(self, fn: Callable[..., Steps], *args: Any) -> Future:
        """Queue the steps of ``fn(*args)`` (a generator of :class:`BatchStep`), to run batched with
        other lanes' steps; the future has the generator's return value (or exception)."""
        return self._engine._submit(self, _Task(fn, args, Future(), steps=True))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on a worker and await its result."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    async def call_steps(self, fn: Callable[..., Steps], *args: Any) -> Any:
        """Run the steps of ``fn(*args)`` on a worker, batched with other lanes', and await the result."""
        return await asyncio.wrap_future(self.submit_steps(fn, *args))

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
      max_batch: most calls in steps that one worker runs together (1: no batching).
      on_idle: called by the worker that leaves the engine with nothing running or queued, at
        most once per ``idle_interval`` seconds (the server: :func:`burble.heap.release_free_memory`);
        an exception from it is dropped.
      idle_interval: the least time between two ``on_idle`` calls.

    Attributes:
      batch_sizes: how many batches of calls in steps ran, by size.
    """

    def __init__(self, workers: int = 1, *, name: str = "burble-engine", max_batch: int = 8,
                 on_idle: Optional[Callable[[], Any]] = None, idle_interval: float = 1.0) -> None:
        if workers < 1 or max_batch < 1:
            raise ValueError("an engine needs at least one worker, and max_batch >= 1")
        self.workers = workers
        self.max_batch = max_batch
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        self._name = name
        self._lock = threading.Condition()
        self._ready: collections.deque[Lane] = collections.deque()  # lanes with work, none running
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._queued = 0
        self.running = 0
        self._on_idle = on_idle
        self._idle_interval = idle_interval
        self._last_idle_call = -float("inf")

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

    def _submit(self, lane: Lane, task: _Task) -> Future:
        future = task.future
        with self._lock:
            if self._closed or lane.closed:
                future.cancel()
                return future
            lane._tasks.append(task)
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
                taken = [self._take(self._ready.popleft())]
                if taken[0][1].steps:  # the other lanes whose next call runs in steps join it
                    for lane in [lane for lane in self._ready if lane._tasks[0].steps][: self.max_batch - 1]:
                        self._ready.remove(lane)
                        taken.append(self._take(lane))
            started = time.perf_counter()
            for lane, task in taken:
                lane.wait_seconds = started - task.submitted
                lane.max_wait_seconds = max(lane.max_wait_seconds, lane.wait_seconds)
            self._run([task for _, task in taken])
            elapsed = (time.perf_counter() - started) / len(taken)  # a batch's time, shared
            lanes = [lane for lane, _ in taken]
            # An idle worker must not hold its last calls: their arguments (a recognizer's bound
            # method, a chunk) would keep a finished stream's state alive until the next call.
            del taken, task
            with self._lock:
                for lane in lanes:
                    lane.busy_seconds += elapsed
                    lane.calls += 1
                    lane._running = False
                    self.running -= 1
                    if lane._tasks and not lane.closed:
                        self._ready.append(lane)  # to the back: the other lanes go first
                        self._lock.notify()
                idle = self._idle_due()
            if idle:
                self._call_on_idle()

    def _idle_due(self) -> bool:
        """Whether ``on_idle`` is due now: nothing runs or waits (called with the lock held)."""
        if self._on_idle is None or self._ready or self.running:
            return False
        now = time.monotonic()
        if now - self._last_idle_call < self._idle_interval:
            return False
        self._last_idle_call = now
        return True

    def _call_on_idle(self) -> None:
        assert self._on_idle is not None
        try:
            self._on_idle()
        except Exception:  # a housekeeping hook must not take a worker down
            pass

    def _run(self, tasks: list[_Task]) -> None:
        """Run one plain call, or calls in steps together; their futures get the outcomes."""
        live = [task for task in tasks if task.future.set_running_or_notify_cancel()]
        if live and live[0].steps:
            self.batch_sizes[len(live)] += 1
            for task, (ok, value) in zip(live, run_together([_start(task) for task in live])):
                task.future.set_result(value) if ok else task.future.set_exception(value)
        elif live:
            try:
                live[0].future.set_result(live[0].fn(*live[0].args))
            except BaseException as error:  # the caller gets it, the worker lives on
                live[0].future.set_exception(error)

    def _take(self, lane: Lane) -> tuple[Lane, _Task]:
        """A ready lane's next call, now running (called with the lock held)."""
        task = lane._tasks.popleft()
        self._queued -= 1
        lane._running = True
        self.running += 1
        return lane, task


def _start(task: _Task) -> Steps:
    """A call's generator of steps (a call that fails before its first step fails alone)."""
    try:
        return task.fn(*task.args)
    except BaseException as error:
        return _raise(error)


def _raise(error: BaseException) -> Steps:
    raise error
    yield  # a generator that fails at its first step


def run_together(calls: Sequence[Steps]) -> list[tuple[bool, Any]]:
    """Run calls in steps side by side: each runs to its next step, the steps that share a
    ``batch_key`` run as one ``run_batch``, each call gets its result, until all have returned.

    Returns ``(True, value)`` or ``(False, exception)`` per call. A batch that fails runs its
    steps one by one, so an error reaches only the call whose step caused it.
    """
    outcomes: list[tuple[bool, Any]] = [(False, None)] * len(calls)
    steps: dict[int, BatchStep] = {}

    def advance(i: int, send: Any = None, throw: Optional[BaseException] = None) -> None:
        try:
            steps[i] = calls[i].throw(throw) if throw is not None else calls[i].send(send)
        except StopIteration as done:
            outcomes[i] = (True, done.value)
        except BaseException as error:
            outcomes[i] = (False, error)

    for i in range(len(calls)):
        advance(i)
    while steps:
        groups: dict[tuple[type, Hashable], list[int]] = {}
        for i, step in steps.items():
            groups.setdefault((type(step), step.batch_key), []).append(i)
        current, steps = steps, {}
        for (kind, _), members in groups.items():
            try:
                results = kind.run_batch([current[i] for i in members])
            except BaseException as error:
                if len(members) == 1:
                    advance(members[0], throw=error)
                else:  # whose step fails? each alone
                    for i in members:
                        _run_alone(kind, current[i], i, advance)
                continue
            for i, result in zip(members, results):
                advance(i, result)
    return outcomes


def run_steps(call: Steps) -> Any:
    """Run one call in steps on this thread (each step a batch of one); its return value."""
    (ok, value), = run_together([call])
    if not ok:
        raise value
    return value


def _run_alone(kind: Any, step: BatchStep, i: int, advance: Callable[..., None]) -> None:
    try:
        result = kind.run_batch([step])
    except BaseException as error:
        advance(i, throw=error)
    else:
        advance(i, result[0])


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
