"""The compute engine: a fixed pool of workers runs every lane's calls in order, at most
``workers`` at once, round-robin across lanes, and a closed lane's queued calls are dropped."""

from __future__ import annotations

import asyncio
import threading
import time
import weakref

import pytest

from burble.streaming.engine import ComputeEngine, default_engine


def _record(log: list, lock: threading.Lock, name: str, seconds: float = 0.02):
    def call() -> str:
        with lock:
            log.append(("in", name, threading.current_thread().name))
        time.sleep(seconds)
        with lock:
            log.append(("out", name, threading.current_thread().name))
        return name

    return call


@pytest.mark.parametrize("workers", [1, 2])
def test_at_most_workers_calls_run_at_once_on_the_engines_threads(workers):
    engine = ComputeEngine(workers, name="test-engine")
    log: list = []
    lock = threading.Lock()
    futures = [engine.lane().submit(_record(log, lock, f"lane{i}")) for i in range(6)]
    assert [f.result(timeout=10) for f in futures] == [f"lane{i}" for i in range(6)]
    running = peak = 0
    for kind, _, _ in log:
        running += 1 if kind == "in" else -1
        peak = max(peak, running)
    assert peak == workers
    assert {thread for _, _, thread in log} == {f"test-engine-{i}" for i in range(workers)}
    assert engine.running == 0 and engine.waiting == 0
    engine.close()


def test_a_lanes_calls_run_in_order_one_at_a_time():
    engine = ComputeEngine(2)
    lane = engine.lane()
    log: list = []
    lock = threading.Lock()
    futures = [lane.submit(_record(log, lock, str(i), 0.005)) for i in range(8)]
    for f in futures:
        f.result(timeout=10)
    assert [name for kind, name, _ in log if kind == "in"] == [str(i) for i in range(8)]
    assert all(log[2 * i][0] == "in" and log[2 * i + 1][0] == "out" for i in range(8))  # never overlapping
    assert lane.calls == 8 and lane.busy_seconds > 0
    engine.close()


def test_lanes_take_turns_so_a_backlog_does_not_starve_a_live_stream():
    """One worker busy with lane A's call; A queues 5 more, then lane B queues one: B runs
    next, before A's backlog (A had its turn)."""
    engine = ComputeEngine(1)
    gate = threading.Event()
    log: list = []
    lock = threading.Lock()
    a, b = engine.lane(), engine.lane()
    started = threading.Event()
    blocker = a.submit(lambda: (started.set(), gate.wait()))
    assert started.wait(10)
    backlog = [a.submit(_record(log, lock, f"a{i}", 0.001)) for i in range(5)]
    live = b.submit(_record(log, lock, "b", 0.001))
    assert engine.waiting == 6 and engine.running == 1  # a running lane's queued calls count too
    gate.set()
    for f in [blocker, *backlog, live]:
        f.result(timeout=10)
    order = [name for kind, name, _ in log if kind == "in"]
    assert order == ["b", "a0", "a1", "a2", "a3", "a4"]
    assert b.wait_seconds < 1.0 and a.max_wait_seconds >= b.wait_seconds
    engine.close()


def test_closing_a_lane_drops_its_queued_calls():
    engine = ComputeEngine(1)
    gate = threading.Event()
    gone, other = engine.lane(), engine.lane()
    started = threading.Event()
    running = gone.submit(lambda: (started.set(), gate.wait())[1])
    assert started.wait(10)
    queued = [gone.submit(lambda: pytest.fail("a closed lane's call ran")) for _ in range(3)]
    after = other.submit(lambda: "other")
    gone.close()
    gate.set()
    assert running.result(timeout=10) is True  # the running call finishes on its own
    assert all(f.cancelled() for f in queued)
    assert engine.waiting <= 1  # the closed lane's calls left the count; only "other" may wait
    assert after.result(timeout=10) == "other"
    assert gone.submit(lambda: 1).cancelled()  # nothing new is taken either
    engine.close()


def test_a_failing_call_reaches_its_caller_and_the_worker_lives_on():
    engine = ComputeEngine(1)
    lane = engine.lane()

    def boom() -> None:
        raise RuntimeError("bad frame")

    with pytest.raises(RuntimeError, match="bad frame"):
        lane.submit(boom).result(timeout=10)
    assert lane.submit(lambda: 42).result(timeout=10) == 42
    engine.close()


def test_calls_are_awaitable_from_the_event_loop():
    lane = default_engine().lane()

    async def main() -> list[int]:
        return list(await asyncio.gather(*(lane.call(lambda i=i: i * i) for i in range(4))))

    assert asyncio.run(main()) == [0, 1, 4, 9]
    assert default_engine() is default_engine()


def test_an_engine_needs_a_worker():
    with pytest.raises(ValueError):
        ComputeEngine(0)


def test_an_idle_worker_holds_nothing_of_its_last_call():
    # A worker that kept its last call would keep that stream's recognizer (the call's bound
    # method and arguments) alive until its next call: on the old code this fails.
    class State:
        def step(self, chunk: bytes) -> int:
            return len(chunk)

    engine = ComputeEngine(1, name="test-engine")
    state = State()
    alive = weakref.ref(state)
    future = engine.lane().submit(state.step, b"chunk")
    assert future.result(timeout=10) == 5
    del state, future
    deadline = time.monotonic() + 5
    while alive() is not None and time.monotonic() < deadline:  # the worker is past set_result
        time.sleep(0.01)
    assert alive() is None
    engine.close()


# -- calls in steps, batched across lanes ------------------------------------------------------


class _Square:
    """A toy step: ``run_batch`` squares every step's value in one call and logs the call."""

    batches: list[list[int]] = []

    def __init__(self, value: int, key: str = "model") -> None:
        self.value, self.batch_key = value, key

    @staticmethod
    def run_batch(steps):
        values = [step.value for step in steps]
        _Square.batches.append(values)
        if any(v < 0 for v in values):
            raise ValueError("a negative value")
        return [v * v for v in values]


def _two_steps(value: int, key: str = "model"):
    first = yield _Square(value, key)
    second = yield _Square(first + 1, key)
    return (value, first, second)


def _blocked_engine(**kwargs):
    """An engine whose only worker waits on an event, so the calls queued meanwhile are all ready."""
    engine = ComputeEngine(1, **kwargs)
    gate = threading.Event()
    engine.lane().submit(gate.wait)
    time.sleep(0.05)
    return engine, gate


def test_ready_lanes_calls_in_steps_run_as_rows_of_one_batch_per_step():
    _Square.batches = []
    engine, gate = _blocked_engine()
    futures = [engine.lane().submit_steps(_two_steps, v) for v in (1, 2, 3, 4)]
    gate.set()
    assert [f.result(timeout=10) for f in futures] == [(v, v * v, (v * v + 1) ** 2) for v in (1, 2, 3, 4)]
    assert _Square.batches == [[1, 2, 3, 4], [2, 5, 10, 17]]  # one call per step, not per lane
    assert engine.batch_sizes == {4: 1}
    engine.close()


def test_a_batch_takes_at_most_max_batch_calls_and_the_rest_wait_their_turn():
    _Square.batches = []
    engine, gate = _blocked_engine(max_batch=2)
    futures = [engine.lane().submit_steps(_two_steps, v) for v in (1, 2, 3, 4, 5)]
    gate.set()
    assert [f.result(timeout=10)[0] for f in futures] == [1, 2, 3, 4, 5]
    assert engine.batch_sizes == {2: 2, 1: 1}
    assert max(len(b) for b in _Square.batches) == 2
    engine.close()


def test_steps_of_different_models_run_in_separate_batches():
    _Square.batches = []
    engine, gate = _blocked_engine()
    futures = [engine.lane().submit_steps(_two_steps, v, key) for v, key in ((1, "a"), (2, "b"), (3, "a"))]
    gate.set()
    assert [f.result(timeout=10) for f in futures] == [(v, v * v, (v * v + 1) ** 2) for v in (1, 2, 3)]
    assert sorted(map(sorted, _Square.batches)) == [[1, 3], [2], [2, 10], [5]]
    engine.close()


def test_a_failing_step_fails_only_its_own_call():
    """A batch that raises is re-run step by step: only the call whose step fails gets the error;
    a call that fails before its first step fails alone too."""

    def broken(value: int):
        raise RuntimeError("no steps")

    _Square.batches = []
    engine, gate = _blocked_engine()
    lanes = [engine.lane() for _ in range(4)]
    futures = [lanes[0].submit_steps(_two_steps, 2), lanes[1].submit_steps(_two_steps, -1),
               lanes[2].submit_steps(broken, 3), lanes[3].submit_steps(_two_steps, 3)]  # fmt: skip
    gate.set()
    assert futures[0].result(timeout=10) == (2, 4, 25) and futures[3].result(timeout=10) == (3, 9, 100)
    with pytest.raises(ValueError, match="negative"):
        futures[1].result(timeout=10)
    with pytest.raises(RuntimeError, match="no steps"):
        futures[2].result(timeout=10)
    assert _Square.batches[0] == [2, -1, 3]  # tried together first
    assert lanes[1].submit_steps(_two_steps, 5).result(timeout=10) == (5, 25, 676)  # the lane lives on
    engine.close()


def test_plain_calls_never_join_a_batch_and_keep_their_lane_order():
    _Square.batches = []
    engine, gate = _blocked_engine()
    lane, other = engine.lane(), engine.lane()
    plain = lane.submit(lambda: "plain")
    after = lane.submit_steps(_two_steps, 1)
    batched = other.submit_steps(_two_steps, 2)
    gate.set()
    assert plain.result(timeout=10) == "plain" and after.result(timeout=10)[0] == 1 and batched.result(timeout=10)[0] == 2
    # The plain call ran alone first; lane's steps, queued behind it, then joined other's.
    assert _Square.batches == [[2, 1], [5, 2]] and engine.batch_sizes == {2: 1}
    engine.close()


def test_run_steps_drives_one_call_alone():
    from burble.streaming.engine import run_steps

    _Square.batches = []
    assert run_steps(_two_steps(3)) == (3, 9, 100) and _Square.batches == [[3], [10]]
    with pytest.raises(ValueError):
        run_steps(_two_steps(-3))


def test_on_idle_runs_when_the_engine_empties_at_most_once_per_interval():
    """Busy workers never call it; the worker that leaves the engine empty does, and a burst of
    short calls within the interval calls it once. A failing hook leaves the worker serving."""
    seen: list[tuple[int, int]] = []
    engine: ComputeEngine

    def on_idle() -> None:
        seen.append((engine.running, engine.waiting))
        raise RuntimeError("a housekeeping hook that fails")

    engine = ComputeEngine(2, on_idle=on_idle, idle_interval=60.0)
    lanes = [engine.lane() for _ in range(4)]
    futures = [lane.submit(time.sleep, 0.01) for lane in lanes for _ in range(3)]
    for f in futures:
        f.result(timeout=10)
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)
    assert seen == [(0, 0)]  # nothing ran or waited when it was called, and only once in 60 s
    assert lanes[0].submit(lambda: "still serving").result(timeout=10) == "still serving"
    time.sleep(0.05)
    assert len(seen) == 1  # the interval holds for later idle moments too
    engine.close()


def test_on_idle_is_called_again_after_its_interval():
    calls: list[float] = []
    engine = ComputeEngine(1, on_idle=lambda: calls.append(time.monotonic()), idle_interval=0.05)
    lane = engine.lane()
    lane.submit(lambda: None).result(timeout=10)
    time.sleep(0.1)
    lane.submit(lambda: None).result(timeout=10)
    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.05
    engine.close()
