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
