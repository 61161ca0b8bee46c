"""A run woken on PostgreSQL is named by its notice, and an idle worker claims it before it reads
the claimable runs: the claim, with the run's replay state and its row, is one round trip, and
only a run still suspended is taken that way (never a recovery the poison rule must count)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from batches import traced_answers
from stalwart import testing
from stalwart._store import Entry, open_store
from stalwart._store.changes import Woken
from stalwart._store.postgres import PostgresStore
from stalwart.testing import store_of
from store_urls import postgres_schema_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    opened = open_store(pg_url)
    assert isinstance(opened, PostgresStore)
    try:
        yield opened
    finally:
        opened.close()


def _parked(store: PostgresStore, wid: str) -> None:
    """A run suspended in a wait for event ``go``."""
    assert store.create_run(
        workflow_id=wid,
        name="agent",
        status="running",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=100.0,
        owner="w1",
        lease_until=130.0,
        entry=Entry(kind="run", name="started", status="completed"),
    )
    step = Entry(kind="step", name="s", status="completed", seq=1, position="0", attempt=1)
    assert store.append(wid, step, owner="w1")
    assert store.suspend_run(wid, owner="w1", wake_at=None, waiting_for="event:go", now=101.0)


def _deliver(store: PostgresStore, wid: str, now: float = 102.0) -> None:
    sent = Entry(kind="event", name="go", status="completed")
    assert store.deliver_event(wid, name="go", payload=b"J1", dedup_key=None, now=now, entry=sent)


def _claim(store: PostgresStore, wid: str, owner: str = "w2", now: float = 200.0) -> Any:
    return store.claim_woken(
        wid, owner=owner, now=now, lease_until=now + 30, entry=Entry.milestone("resumed", now)
    )


def test_an_event_that_wakes_a_run_names_it_in_its_notice(store: PostgresStore) -> None:
    _parked(store, "r")
    store.changes.current()  # starts the listener
    deadline = time.monotonic() + 10
    while not store.changes.live and time.monotonic() < deadline:
        time.sleep(0.01)
    seen = store.changes.version
    _deliver(store, "r")
    named: list[Woken] = []
    while not named and time.monotonic() < deadline:
        store.changes.wait(seen, 0.1)
        named += store.changes.take_woken()
    assert named == [Woken("r", "agent", "default", 102.0)]
    # once claimed, an event wakes nothing: nothing is named
    assert _claim(store, "r").taken
    _deliver(store, "r", now=103.0)
    time.sleep(0.3)
    assert store.changes.take_woken() == []


def test_a_woken_run_is_claimed_with_its_replay_state_and_row_in_one_round_trip(
    store: PostgresStore, tmp_path: Path
) -> None:
    _parked(store, "r")
    _deliver(store, "r")
    claim, answers = traced_answers(store, tmp_path, functools.partial(_claim, store, "r"))
    assert claim.taken and claim.recoveries == 0
    assert answers == 1  # BEGIN, the claim, its entry, the replay read, the row, COMMIT
    assert claim.replay == store.replay_state("r")
    assert [row.name for row in claim.replay.index] == ["s"]
    assert claim.row == store.get_run("r")
    assert (claim.row.status, claim.row.lease_owner) == ("running", "w2")
    assert [e.name for e in store.journal("r")][-1] == "resumed"
    # held now: a second claim of the same notice is refused and writes nothing
    assert not _claim(store, "r", owner="w3", now=201.0).taken
    assert [e.name for e in store.journal("r")].count("resumed") == 1


def test_only_a_suspended_and_due_run_is_claimed_as_woken(store: PostgresStore) -> None:
    _parked(store, "r")
    assert not _claim(store, "r").taken  # suspended, not woken yet: not due
    _deliver(store, "r")
    assert store.take_lease(
        "r", owner="w2", expected_owner=None, now=200.0, lease_until=230.0
    ).taken
    # its holder gave its lease back mid-flight: a recovery, for the regular claim to count
    assert store.release_lease("r", owner="w2", now=201.0)
    assert not _claim(store, "r", owner="w3", now=202.0).taken
    row = store.get_run("r")
    assert row is not None and (row.status, row.lease_owner) == ("running", None)
    assert [e.name for e in store.journal("r")].count("resumed") == 0


def test_a_woken_claim_locked_by_another_claimant_is_refused(store: PostgresStore) -> None:
    _parked(store, "r")
    _deliver(store, "r")
    with store._pool.connection() as conn, conn.transaction():
        conn.execute("SELECT 1 FROM runs WHERE workflow_id = 'r' FOR UPDATE")
        assert not _claim(store, "r").taken  # not waited for
    assert _claim(store, "r").taken


def test_a_woken_claim_whose_commit_answer_was_lost_is_taken(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from stalwart._store import postgres

    _parked(store, "r")
    _deliver(store, "r")
    real = postgres.send_ahead
    lost: list[int] = []

    def commits_then_loses_the_answer(conn: Any, send: Any) -> Any:
        done = real(conn, send)  # committed: the claim landed
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    monkeypatch.setattr(postgres, "send_ahead", commits_then_loses_the_answer)
    claim = _claim(store, "r")
    assert lost == [1]
    assert claim.taken
    # what was read with it, where its answer came, is the committed claim's
    assert claim.replay in (None, store.replay_state("r"))
    assert claim.row in (None, store.get_run("r"))
    row = store.get_run("r")
    assert row is not None and row.lease_owner == "w2"
    assert [e.name for e in store.journal("r")].count("resumed") == 1


def test_a_worker_claims_a_woken_run_before_reading_the_claimable_runs(pg_url: str) -> None:
    calls: list[str] = []
    resumed = threading.Event()
    with stalwart.Stalwart(pg_url) as app, stalwart.Stalwart(pg_url) as client:

        @app.workflow(name="waiter")
        def waiter() -> int:
            got = int(stalwart.wait_for_event("go", timeout=60))
            calls.append("step")  # the step after the wait: the resume
            resumed.set()
            return got

        @client.workflow(name="waiter")
        def waiter_client() -> int:
            raise AssertionError("runs on the worker")

        store = store_of(app)
        for verb in ("claim_candidates", "take_lease", "claim_woken"):
            real = getattr(store, verb)

            def logged(*args: Any, _verb: str = verb, _real: Any = real, **kw: Any) -> Any:
                result = _real(*args, **kw)
                calls.append(_verb)
                return result

            setattr(store, verb, logged)
        worker = testing.worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            handle = client.start(waiter_client)
            deadline = time.monotonic() + 20
            while handle.status() != "suspended" and time.monotonic() < deadline:
                time.sleep(0.02)
            assert handle.status() == "suspended"
            time.sleep(0.3)  # the worker idle: its loop's last reads are done
            calls.clear()
            client.send_event(handle.workflow_id, "go", 7)
            assert resumed.wait(20)
            assert handle.result(timeout=20) == 7
        finally:
            worker.stop()
            thread.join(timeout=30)
    assert calls[0] == "claim_woken"  # no read of the claimable runs before it
    assert calls.index("step") > 0 and "take_lease" not in calls[: calls.index("step")]
