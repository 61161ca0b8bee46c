"""A worker process finishes a run and a caller in this process gets ``Handle.result()``,
woken by the store's change signal (SQLite's data_version, PostgreSQL's NOTIFY), on both
stores; PostgreSQL's listener survives losing its connection, polling while it is away."""

from __future__ import annotations

import time

import psycopg
import pytest
from fault_harness import WorkerHarness

from stalwart.testing import store_of
from store_urls import postgres_schema_url

RUNS = 5


def test_a_caller_gets_what_a_worker_process_finished(workers: WorkerHarness) -> None:
    proc = workers.start(concurrency=2)
    app, wf = workers.app()
    handles = [app.start(wf["parked_agent"], f"t{i}", workflow_id=f"park-{i}") for i in range(RUNS)]
    workers.wait_for(
        lambda: all(h.status() == "suspended" for h in handles), "all parked", 30, [proc]
    )
    changes = store_of(app).changes
    for i, handle in enumerate(handles):
        before = changes.current()
        app.send_event(handle.workflow_id, "go", i)
        assert handle.result(timeout=30) == {"tag": f"t{i}", "payload": i}
        assert changes.version != before, "the result came without a change signal"


@pytest.fixture
def pg_workers(tmp_path: object) -> object:
    for url in postgres_schema_url():
        harness = WorkerHarness(tmp_path, url)  # type: ignore[arg-type]
        try:
            yield harness
        finally:
            harness.close()


def test_a_listener_that_lost_its_connection_polls_then_listens_again(
    pg_workers: WorkerHarness,
) -> None:
    proc = pg_workers.start(concurrency=2)
    app, wf = pg_workers.app()
    store = store_of(app)
    changes = store.changes
    changes.current()
    pg_workers.wait_for(lambda: changes.live, "the listener connected", 30, [proc])
    listener = store._listener  # type: ignore[attr-defined]
    first_pid = listener.backend_pid
    with psycopg.connect(pg_workers.url.split("?")[0], autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
    pg_workers.wait_for(
        lambda: listener.backend_pid != first_pid and changes.live,
        "the listener reconnected",
        30,
        [proc],
    )
    handle = app.start(wf["parked_agent"], "back", workflow_id="after-reconnect")
    pg_workers.wait_for(lambda: handle.status() == "suspended", "parked", 30, [proc])
    app.send_event(handle.workflow_id, "go", "again")
    assert handle.result(timeout=30) == {"tag": "back", "payload": "again"}


def test_while_the_listener_is_down_a_waiter_polls(pg_workers: WorkerHarness) -> None:
    app, _wf = pg_workers.app()
    changes = store_of(app).changes
    changes.current()
    pg_workers.wait_for(lambda: changes.live, "the listener connected", 30)
    changes.live = False  # as the listener marks it while it reconnects
    seen = changes.version
    began = time.monotonic()
    assert changes.wait(seen, 30) == seen  # back to the caller to look for itself
    assert time.monotonic() - began < 5
