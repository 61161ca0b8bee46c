"""What operators read: counts and pages of runs, one run described (what it waits on, the step
it executes now), the queues apps declared and the workers serving the store."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import stalwart
from stalwart import testing
from stalwart._store.base import WorkerRow
from stalwart.testing import FakeClock


def test_runs_page_exactly_even_when_they_share_a_creation_time(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    @app.workflow
    def agent() -> None: ...

    for i in range(7):  # the fake clock stands still: all seven share one created_at
        app.start(agent, workflow_id=f"run-{i}")
    seen: list[str] = []
    before: Any = None
    while True:
        page = app.list_workflows(limit=3, before=before)
        if not page:
            break
        seen += [r.workflow_id for r in page]
        before = page[-1]
    assert seen == [f"run-{i}" for i in reversed(range(7))]
    assert app.count_workflows() == 7
    assert app.count_workflows(status="pending", name=agent.__qualname__) == 7
    assert app.count_workflows(status="completed") == 0


def test_filters_by_queue_and_since(app: stalwart.Stalwart, clock: FakeClock) -> None:
    @app.workflow(queue="slow")
    def slow() -> None: ...

    @app.workflow
    def fast() -> None: ...

    app.start(slow, workflow_id="old")
    clock.advance(3600)
    start = clock.time()
    app.start(slow, workflow_id="new")
    app.start(fast, workflow_id="other")
    assert [r.workflow_id for r in app.list_workflows(queue="slow")] == ["new", "old"]
    assert {r.workflow_id for r in app.list_workflows(since=start)} == {"new", "other"}
    assert app.count_workflows(queue="slow", since=start) == 1
    for bad, message in [
        ({"since": "yesterday"}, "since='yesterday': pass a datetime"),
        ({"before": "x"}, "before='x': pass a datetime"),
        ({"queue": ""}, "queue='': pass a queue name"),
    ]:
        with pytest.raises(stalwart.UsageError, match=message):
            app.list_workflows(**bad)


def test_describe_says_what_a_run_waits_on(app: stalwart.Stalwart, clock: FakeClock) -> None:
    @app.workflow
    def waits_for_event() -> Any:
        return stalwart.wait_for_event("payment")

    @app.workflow
    def sleeps() -> None:
        stalwart.sleep(600)

    @app.workflow
    def asks() -> Any:
        return stalwart.request_approval("refund 40 EUR")

    app.queue("limited", concurrency=1)

    @app.workflow(queue="limited")
    def queued() -> None: ...

    worker = testing.worker(app, concurrency=2)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        for wf, wid in [(waits_for_event, "e"), (sleeps, "t"), (asks, "a")]:
            app.start(wf, workflow_id=wid)
        deadline = time.monotonic() + 10
        while {app.handle(w).status() for w in "eta"} != {"suspended"}:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        worker.stop()
        thread.join(10)
    app.start(queued, workflow_id="q")
    waiting = {wid: app.describe(wid).waiting_for for wid in "etaq"}
    assert waiting["e"] == "event payment"
    assert waiting["a"] == "approval refund 40 EUR"
    assert waiting["t"] is not None and waiting["t"].startswith("timer until 2026-01-01T00:10:00")
    assert waiting["q"] == "queue limited"
    detail = app.describe("e")
    assert detail.info.workflow_id == "e" and detail.info.status == "suspended"
    assert detail.current is None and detail.usage == stalwart.Usage()
    with pytest.raises(stalwart.WorkflowNotFound):
        app.describe("nope")


def test_describe_shows_the_step_a_run_executes_now(shared_url: str) -> None:
    release = threading.Event()
    with stalwart.Stalwart(shared_url, lease_seconds=3) as app:

        @app.step
        def long_call(n: int) -> int:
            stalwart.heartbeat({"done": n})
            release.wait(20)
            return n

        @app.workflow
        def agent() -> int:
            return long_call(1) + long_call(2)

        worker = testing.worker(app, concurrency=1)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            app.start(agent, workflow_id="busy")
            deadline = time.monotonic() + 10
            while (current := app.describe("busy").current) is None:
                assert time.monotonic() < deadline, "the current step was never published"
                time.sleep(0.02)
            assert (current.name, current.seq, current.attempt) == (long_call.__qualname__, 1, 1)
            assert current.heartbeat == {"done": 1}
            assert current.holder is not None and current.holder.startswith(
                testing.runtime_of(app).owner
            )
            assert time.time() - current.started_at.timestamp() < 10
            while (info := app.workers()[0]).running != 1:  # its next beat counts the run
                assert time.monotonic() < deadline, info
                time.sleep(0.05)
            assert info.id == testing.runtime_of(app).owner
            assert info.queues == ["default"] and info.pid > 0
            release.set()
            assert app.handle("busy").result(timeout=10) == 3
        finally:
            release.set()
            worker.stop()
            thread.join(10)
        assert app.describe("busy").current is None
        assert app.workers() == []  # a worker that stopped removes its row


def test_queues_list_declared_limits_and_what_waits(app: stalwart.Stalwart) -> None:
    app.queue("emails", concurrency=2, rate=10, period=60)

    @app.workflow(queue="emails")
    def send() -> None: ...

    @app.workflow
    def other() -> None: ...

    for i in range(3):
        app.start(send, workflow_id=f"mail-{i}")
    app.start(other, workflow_id="plain")
    queues = {q.name: q for q in app.queues()}
    assert queues["emails"] == stalwart.QueueInfo("emails", 2, 10, 60.0, 3, 0)
    assert queues["default"] == stalwart.QueueInfo("default", None, None, 1.0, 1, 0)
    app.queue("emails", concurrency=5)  # declaring again replaces its limits
    assert next(q for q in app.queues() if q.name == "emails").concurrency == 5


def test_workers_not_seen_for_three_lease_periods_are_dropped(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    store = testing.store_of(app)
    now = clock.time()
    store.beat_worker(WorkerRow("gone/1", "h", 1, '["default"]', now, now, 0))
    assert [w.id for w in app.workers()] == ["gone/1"]
    clock.advance(3 * 30 + 1)
    assert app.workers() == []
