"""A queue at its limit must not hide other queues' runs from a worker.

Once, the worker looked at the best few claimable runs across all its queues; when
those all belonged to a queue at its rate limit, runs of every other queue waited until that
queue drained.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import stalwart
from stalwart import testing
from stalwart._store import Entry
from stalwart.testing import runtime_of, store_of


def test_runs_of_other_queues_start_while_a_queue_waits_for_its_rate(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:
        app.queue("quota", rate=1, period=3600.0)

        @app.workflow(name="quoted", queue="quota")
        def quoted(i: int) -> int:
            return i

        @app.workflow(name="plain")
        def plain() -> str:
            return "ran"

        blocked = [app.start(quoted, i, priority=10) for i in range(40)]
        late = app.start(plain)  # newer and of lower priority than every quota run
        worker = testing.worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            assert late.result(timeout=20) == "ran"
            # The one start of the hour was taken before the plain run (it has the higher
            # priority) and may still be finishing beside it on a loaded machine.
            deadline = time.monotonic() + 20
            while not any(h.status() == "completed" for h in blocked):
                assert time.monotonic() < deadline, "the quota's one start never ran"
                time.sleep(0.01)
            statuses = [h.status() for h in blocked]
            assert statuses.count("completed") == 1  # one start per hour
            assert statuses.count("pending") == len(blocked) - 1
        finally:
            worker.stop()
            thread.join(timeout=30)


def test_a_due_timer_in_a_full_queue_does_not_make_the_worker_spin(store_url: str) -> None:
    """Once, the next poll was set by the earliest due timer, even one whose queue
    was full, so the worker tried to claim it every 10 ms until a slot freed up."""
    with stalwart.Stalwart(store_url) as app:
        app.queue("q", concurrency=1)
        release = threading.Event()
        holding = threading.Event()

        @app.step
        def hold() -> str:
            holding.set()
            release.wait(30)
            return "held"

        @app.workflow(name="sleeper", queue="q")
        def sleeper() -> str:
            stalwart.sleep(0.2)
            return "slept"

        @app.workflow(name="holder", queue="q")
        def holder() -> str:
            return hold()

        store = store_of(app)
        calls = []
        take = store.take_lease

        def counting(*args: Any, **kwargs: Any) -> tuple[bool, int]:
            calls.append(time.monotonic())
            return take(*args, **kwargs)

        take_all = store.take_leases

        def counting_all(asks: list[Any]) -> list[Any]:
            calls.extend(time.monotonic() for _ in asks)  # claims made together
            return take_all(asks)

        store.take_lease = counting  # type: ignore[method-assign]
        store.take_leases = counting_all  # type: ignore[method-assign]
        worker = testing.worker(app, concurrency=4)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            slept = app.start(sleeper)
            deadline = time.monotonic() + 20
            while slept.status() != "suspended" and time.monotonic() < deadline:
                time.sleep(0.01)
            held = app.start(holder)
            assert holding.wait(20)
            time.sleep(0.5)  # the sleeper's timer is now due, and its queue full
            counted = len(calls)
            time.sleep(1.0)
            assert len(calls) - counted <= 10, f"{len(calls) - counted} claims in 1 s"
            release.set()
            assert held.result(timeout=20) == "held"
            assert slept.result(timeout=20) == "slept"
        finally:
            release.set()
            worker.stop()
            thread.join(timeout=30)


def test_a_lapsed_run_holding_the_last_slot_is_taken_over_despite_a_higher_priority_backlog(
    store_url: str,
) -> None:
    """Once, a pending run refused by its full queue hid the run holding the slot,
    whose worker had died; taking it over needs no slot, but it was never tried."""
    with stalwart.Stalwart(store_url) as app:
        app.queue("q", concurrency=1)

        @app.workflow(name="job", queue="q")
        def job(tag: str) -> str:
            return tag

        store = store_of(app)
        now = runtime_of(app).clock.time()
        payload = runtime_of(app).codec.encode({"args": ["orphan"], "kwargs": {}})
        store.create_run(  # held by a worker on another machine that died; its lease lapsed
            workflow_id="orphan",
            name="job",
            status="running",
            queue="q",
            priority=0,
            input=payload,
            now=now - 60,
            owner="elsewhere/1/1/dead#1",
            lease_until=now - 30,
            entry=Entry(kind="run", name="started", status="completed", started_at=now - 60),
        )
        urgent = app.start(job, "urgent", priority=10)
        worker = testing.worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            assert app.handle("orphan").result(timeout=20) == "orphan"
            assert urgent.result(timeout=20) == "urgent"
        finally:
            worker.stop()
            thread.join(timeout=30)
