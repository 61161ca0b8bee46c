"""Retention and prune (docs/lifecycle.md) on every backend: an ended run goes with every row
kept for it, in one transaction; runs under way, needs_attention runs and parents of children
under way stay; filters, dry runs, a prune run twice; retention of the app and of a workflow,
swept as a worker sweeps; and the collector: a value another run shares stays, the rest goes."""

from __future__ import annotations

import datetime as _dt
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import stalwart
from stalwart._prune import Sweeper
from stalwart._store.snapshots import StoredChunk
from stalwart.testing import FakeClock, store_of

pytestmark = pytest.mark.timeout(60)

BIG = "a long value kept apart from its journal row " * 200  # about 9 KiB: a tree
# every table that keeps rows for a run by its id
RUN_TABLES = (
    "runs",
    "journal",
    "events",
    "approvals",
    "run_spend",
    "run_spend_steps",
    "run_calls",
    "snapshots",
    "stream_chunks",
)
Sql = Callable[..., list[Any]]


def _declare(app: stalwart.Stalwart) -> dict[str, Any]:
    @app.step
    def echo(value: str) -> str:
        return value

    @app.workflow(name="job")
    def job(value: str) -> str:
        return echo(value) + echo(value + "!")

    @app.workflow(name="waits")
    def waits() -> Any:
        return stalwart.wait_for_event("go")

    @app.workflow(name="parent")
    def parent() -> str:
        stalwart.start_child(waits, workflow_id="child", detached=True)
        return "started"

    return {"job": job, "waits": waits, "parent": parent, "echo": echo}


def _rows_of(raw_sql: Sql, app: stalwart.Stalwart, workflow_id: str) -> dict[str, int]:
    counts = {}
    for table in RUN_TABLES:
        query = f"SELECT count(*) FROM {table} WHERE workflow_id = :id"
        counts[table] = int(raw_sql(app, query, {"id": workflow_id})[0][0])
    return counts


def _give_it_everything(raw_sql: Sql, app: stalwart.Stalwart, workflow_id: str) -> None:
    """An event, an approval, a stream chunk and a snapshot with a chunk, as a run that had them
    keeps them."""
    raw_sql(
        app,
        "INSERT INTO events (workflow_id, name, payload, sent_at, consumed_seq) "
        "VALUES (:id, 'late', NULL, 1.0, NULL)",
        {"id": workflow_id},
    )
    raw_sql(
        app,
        "INSERT INTO approvals (workflow_id, approval_id, subject, requested_at) "
        "VALUES (:id, 'a1', 'ship it?', 1.0)",
        {"id": workflow_id},
    )
    raw_sql(
        app,
        'INSERT INTO stream_chunks (workflow_id, stream, "offset", seq, attempt, origin, data, at) '
        "VALUES (:id, 'tokens', 0, 1, 1, 'o1', :data, 1.0)",
        {"id": workflow_id, "data": b"hello"},
    )
    store = store_of(app)
    snapshot = f"s1@{workflow_id}"
    assert store.begin_snapshot(snapshot, workflow_id=workflow_id, name="w", now=1.0)
    data = workflow_id.encode() * 50
    chunk = StoredChunk(hashlib.sha256(data).digest(), len(data), b"z" + data)
    store.put_chunks(snapshot, [chunk], now=time.time())
    store.finish_snapshot(snapshot, files=0, bytes=0, stored_bytes=0)


def test_a_prune_deletes_an_ended_run_with_every_row_kept_for_it(
    app: stalwart.Stalwart, clock: FakeClock, raw_sql: Sql
) -> None:
    wfs = _declare(app)
    app.run(wfs["job"], BIG, workflow_id="old")
    app.run(wfs["job"], "small", workflow_id="kept")
    _give_it_everything(raw_sql, app, "old")
    assert all(_rows_of(raw_sql, app, "old")[t] for t in ("runs", "journal", "events"))
    clock.advance(100)
    app.run(wfs["job"], "new", workflow_id="new")  # ended after the cutoff
    assert app.prune(50, dry_run=True) == 2
    assert app.prune(50) == 2
    assert set(_rows_of(raw_sql, app, "old").values()) == {0}
    assert set(_rows_of(raw_sql, app, "kept").values()) == {0}
    assert raw_sql(app, "SELECT count(*) FROM snapshot_uses")[0][0] == 0
    assert raw_sql(app, "SELECT count(*) FROM snapshot_files")[0][0] == 0
    assert app.handle("new").result() == "newnew!"
    with pytest.raises(stalwart.WorkflowNotFound):
        app.handle("old")
    assert app.prune(50) == 0  # run again: nothing left to do


def test_runs_under_way_needs_attention_and_parents_of_children_under_way_are_kept(
    app: stalwart.Stalwart, clock: FakeClock, raw_sql: Sql
) -> None:
    wfs = _declare(app)
    app.start(wfs["waits"], workflow_id="pending")
    app.run(wfs["job"], "x", workflow_id="attention")
    raw_sql(app, "UPDATE runs SET status = 'needs_attention' WHERE workflow_id = 'attention'")
    app.run(wfs["parent"], workflow_id="parent")  # ended; its detached child waits
    clock.advance(100)
    assert app.prune(0) == 0
    assert {r.workflow_id for r in app.list_workflows(limit=10)} == {
        "pending",
        "attention",
        "parent",
        "child",
    }
    raw_sql(app, "UPDATE runs SET status = 'cancelled' WHERE workflow_id = 'child'")
    assert app.prune(0) == 2  # the child ended: it goes, and its parent with it
    assert {r.workflow_id for r in app.list_workflows(limit=10)} == {"pending", "attention"}


def test_an_ended_child_stays_while_its_parent_runs_and_goes_with_it(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    """A parent reads its children's outcomes from their rows when it gets to them: a child
    that ended is kept while its parent has not, and the parent then completes."""
    wfs = _declare(app)

    @app.workflow(name="gatherer")
    def gatherer() -> list[str]:
        kids = [stalwart.start_child(wfs["job"], str(n), workflow_id=f"kid-{n}") for n in (1, 2)]
        stalwart.wait_for_event("collect")  # the children end meanwhile
        return [str(kid.result()) for kid in kids]

    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(app.run(gatherer)), daemon=True)
    runner.start()  # app.run executes the children while their parent waits
    deadline = time.monotonic() + 30
    while [r.status for r in app.list_workflows(name="job", limit=10)] != ["completed"] * 2:
        assert time.monotonic() < deadline, "the children did not end"
        time.sleep(0.01)
    parent = app.list_workflows(name="gatherer", limit=1)[0].workflow_id
    clock.advance(100)
    assert app.prune(0) == 0  # both children ended, their parent has not
    app.send_event(parent, "collect")
    runner.join(30)
    assert results == [["11!", "22!"]]
    clock.advance(100)
    assert app.prune(0) == 3  # the parent ended: it goes, and its children with it


def test_a_child_of_a_failed_parent_stays_until_the_parent_goes(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    """A failed parent is open to ``retry``, which reads its children's rows again: its
    children are kept, whatever a prune's filter, until the parent itself is pruned."""
    wfs = _declare(app)

    @app.step(retry=stalwart.Retry.never())
    def breaks() -> None:
        raise RuntimeError("down")

    @app.workflow(name="fails_after_a_child")
    def fails_after_a_child() -> str:
        kid = stalwart.start_child(wfs["job"], "k", workflow_id="kid-of-failed")
        kid.result()
        breaks()
        return "never"

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(fails_after_a_child, workflow_id="failed-parent")
    assert app.handle("kid-of-failed").status() == "completed"
    clock.advance(100)
    assert app.prune(0, name="job") == 0  # its parent failed: it may be retried
    assert app.prune(0) == 2  # the parent goes (no child under way), then its child
    assert app.list_workflows(limit=10) == []


def test_a_prune_selects_by_status_name_and_time(app: stalwart.Stalwart, clock: FakeClock) -> None:
    wfs = _declare(app)
    app.run(wfs["job"], "a", workflow_id="job-1")
    app.run(wfs["parent"], workflow_id="parent-1")
    app.cancel("child")
    clock.advance(10)
    when = _dt.datetime.fromtimestamp(clock.time(), _dt.UTC)
    clock.advance(10)
    app.run(wfs["job"], "b", workflow_id="job-2")
    assert app.prune(when, status="failed") == 0
    assert app.prune(when, name="job", dry_run=True) == 1
    assert app.prune(when, status="cancelled") == 1  # the child
    assert app.prune(_dt.timedelta(seconds=5), name="job") == 1
    assert {r.workflow_id for r in app.list_workflows(limit=10)} == {"parent-1", "job-2"}


@pytest.mark.parametrize("status", ["running", "pending", "needs_attention", "nonsense"])
def test_a_prune_takes_only_an_ended_status(app: stalwart.Stalwart, status: str) -> None:
    with pytest.raises(ValueError, match="ended runs only"):
        app.prune(0, status=status)


def test_retention_must_be_a_positive_duration(store_url: str) -> None:
    with pytest.raises(ValueError, match="retention"):
        stalwart.Stalwart(store_url, retention=-1)
    with (
        stalwart.Stalwart(store_url, retention=_dt.timedelta(days=30)) as app,
        pytest.raises(ValueError, match="retention"),
    ):
        app.workflow(retention="30d")(lambda: None)


def test_a_workflows_retention_overrides_the_apps(store_url: str, clock: FakeClock) -> None:
    with stalwart.Stalwart(store_url, clock=clock, retention=100) as app:

        @app.workflow(name="brief", retention=10)
        def brief() -> int:
            return 1

        @app.workflow(name="plain")
        def plain() -> int:
            return 2

        app.run(brief, workflow_id="brief-1")
        app.run(plain, workflow_id="plain-1")
        counted: list[int] = []
        sweeper = Sweeper(app._runtime, threading.Event(), counted.append)
        clock.advance(50)
        assert sweeper.sweep() == 1  # brief's retention passed, the app's not yet
        clock.advance(60)
        assert sweeper.sweep() == 1
        assert counted == [1, 1]
        assert app.list_workflows(limit=10) == []


def test_the_collector_keeps_what_a_run_still_uses_and_deletes_the_rest(
    app: stalwart.Stalwart, clock: FakeClock, raw_sql: Sql
) -> None:
    wfs = _declare(app)

    @app.workflow(name="once")
    def once(value: str) -> str:
        return str(wfs["echo"](value)) + str(wfs["echo"](value + "!"))

    app.run(wfs["job"], BIG + " and more", workflow_id="stays")
    app.run(once, BIG, workflow_id="gone")  # shares most pieces with "stays"
    _give_it_everything(raw_sql, app, "gone")
    store = store_of(app)
    later = time.time() + 7200  # past the grace window of every row written here
    assert store.collect_payloads(now=later) == 0  # every row is still used
    before = raw_sql(app, "SELECT count(*) FROM payloads")[0][0]
    clock.advance(1)
    assert app.prune(_dt.timedelta(0), name="once") == 1
    assert raw_sql(app, "SELECT count(*) FROM payloads")[0][0] == before  # within the grace
    collected = store.collect_payloads(now=later)
    assert 0 < collected < before
    assert store.collect_chunks(now=later) == 1
    assert store.collect_payloads(now=later) == 0 and store.collect_chunks(now=later) == 0
    assert app.handle("stays").result() == 2 * (BIG + " and more") + "!"
    assert [e.status for e in store.journal("stays")][-1] == "completed"
