"""A batch of the write pipeline on PostgreSQL goes out whole: its BEGIN, its statements and
its COMMIT are answered once, a batch whose answer was lost is not written twice, and a run
ended in a batch does what a run ended alone does (its approvals closed, its parent woken).
Recovery claims go out whole with the batch too, each refused alone; a lone claim reads the
run's replay state in its own round trip, and a wait decided by an event waits twice."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batches import together, traced_answers
from stalwart._store import Entry, open_store
from stalwart._store.base import WaitDecision
from stalwart._store.postgres import PostgresStore
from store_urls import postgres_schema_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    for url in postgres_schema_url():
        opened = open_store(url)
        assert isinstance(opened, PostgresStore)
        try:
            yield opened
        finally:
            opened.close()


def _held(store: PostgresStore, wid: str, *, status: str = "running") -> None:
    assert store.create_run(
        workflow_id=wid,
        name="agent",
        status=status,
        queue="default",
        priority=0,
        input=b"Jnull",
        now=100.0,
        owner="w1" if status == "running" else None,
        lease_until=130.0 if status == "running" else None,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _step(seq: int) -> Entry:
    return Entry(
        kind="step", name="s", status="completed", seq=seq, position=str(seq - 1), attempt=1
    )


def _end() -> Entry:
    return Entry(kind="run", name="completed", status="completed", started_at=101.0)


def _finish(store: PostgresStore, wid: str) -> bool:
    return store.finish_run(
        wid, owner="w1", status="completed", output=None, error=None, now=101.0, entry=_end()
    )


def test_a_batch_waits_for_the_server_once(store: PostgresStore, tmp_path: Path) -> None:
    for wid in ("r1", "r2", "r3"):
        _held(store, wid)
    _held(store, "p", status="pending")
    calls = [
        lambda: store.append("r1", _step(1), owner="w1"),
        lambda: _finish(store, "r2"),
        lambda: store.append("r3", _step(1), owner="w1"),
        lambda: store.take_lease(
            "p",
            owner="w1",
            expected_owner=None,
            now=101.0,
            lease_until=130.0,
            entry=Entry.milestone("resumed", 101.0),
        ),
        lambda: store.mark_retry("r3", owner="w1", marker="2:1"),
    ]
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        with store._writer.connection() as conn:  # the pipeline's one connection
            conn.pgconn.trace(out.fileno())
        try:
            results, batches = together(store, calls)
        finally:
            with store._writer.connection() as conn:
                conn.pgconn.untrace()
    assert [results[0], results[1], results[2], results[3].taken, results[4]] == [True] * 5
    assert batches == [5]
    answers = [line for line in trace.read_text().splitlines() if "ReadyForQuery" in line]
    assert len(answers) == 1
    assert [e.name for e in store.journal("r2")] == ["started", "completed"]


@contextlib.contextmanager
def _first_answer_lost(store: PostgresStore) -> Iterator[list[int]]:
    """The first batch the block sends commits and its answer is lost (the connection drops);
    the list holds a 1 once that happened."""
    import psycopg

    real = store._send_batch
    lost: list[int] = []

    def commits_then_loses_the_answer(conn: Any, sends: Any) -> list[Any]:
        done = real(conn, sends)  # committed: it landed
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    store._send_batch = commits_then_loses_the_answer  # type: ignore[method-assign]
    try:
        yield lost
    finally:
        del store._send_batch


def test_a_batch_whose_answer_was_lost_is_recorded_once(store: PostgresStore) -> None:
    for wid in ("r1", "r2"):
        _held(store, wid)
    with _first_answer_lost(store) as lost:
        results, batches = together(
            store,
            [
                lambda: store.append("r1", _step(1), owner="w1"),
                lambda: store.append("r2", _step(1), owner="w2"),  # not the holder: refused
                lambda: _finish(store, "r1"),
                lambda: store.mark_retry("r2", owner="w1", marker="2:1"),  # journals nothing
            ],
        )
    assert lost == [1]
    assert results == [True, False, True, True]
    assert batches == [4]
    assert [e.name for e in store.journal("r1")] == ["started", "s", "completed"]
    assert store.get_run("r2").retrying == "2:1"
    assert [e.name for e in store.journal("r2")] == ["started"]


def test_a_child_ended_in_a_batch_wakes_its_parent_and_closes_its_approvals(
    store: PostgresStore,
) -> None:
    for wid in ("parent", "child", "other"):
        _held(store, wid)
    with store._pool.connection() as conn:
        conn.execute(
            "UPDATE runs SET status = 'suspended', lease_owner = NULL, waiting_for = 'child:child'"
            " WHERE workflow_id = 'parent'"
        )
        conn.execute("UPDATE runs SET parent_id = 'parent' WHERE workflow_id = 'child'")
        conn.execute(
            "INSERT INTO approvals (workflow_id, approval_id, subject, requested_at)"
            " VALUES ('child', 'a1', 'ok?', 100.0)"
        )
    results, batches = together(
        store, [lambda: _finish(store, "child"), lambda: _finish(store, "other")]
    )
    assert results == [True, True]
    assert batches == [2]
    with store._pool.connection() as conn:
        woken = conn.execute("SELECT wake_at FROM runs WHERE workflow_id = 'parent'").fetchone()
        closed = conn.execute(
            "SELECT decided_at, reason FROM approvals WHERE workflow_id = 'child'"
        ).fetchone()
    assert woken == (101.0,)
    assert closed == (101.0, "run completed")


def _recover(store: PostgresStore, wid: str) -> Any:
    return store.take_lease(
        wid,
        owner="w2",
        expected_owner="w1",
        now=200.0,
        lease_until=230.0,
        entry=Entry.milestone("resumed", 200.0),
        recovery=True,
    )


def _resume_claim(store: PostgresStore, owner: str = "w2", now: float = 200.0) -> Any:
    """``owner``'s claim of the parked run ``r`` at ``now``, as a resume takes it (journaled,
    with the replay state)."""
    return store.take_lease(
        "r",
        owner=owner,
        expected_owner=None,
        now=now,
        lease_until=now + 30.0,
        entry=Entry.milestone("resumed", now),
        replay=True,
    )


def _recovery_state(store: PostgresStore, wid: str) -> tuple[Any, ...]:
    with store._pool.connection() as conn:
        row = conn.execute(
            "SELECT lease_owner, recoveries, recovery_mark FROM runs WHERE workflow_id = %s",
            (wid,),
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_recovery_claims_in_a_batch_wait_for_the_server_once(
    store: PostgresStore, tmp_path: Path
) -> None:
    # again: a second recovery in a row (no completed entry since the last one's mark);
    # moved: completed a step since its last recovery; live: its holder's lease has not
    # lapsed, so taking it over is refused, and the batch's others still commit.
    for wid in ("again", "moved", "fresh", "live"):
        _held(store, wid)
    assert store.append("moved", _step(1), owner="w1")
    with store._pool.connection() as conn:
        conn.execute(
            "UPDATE runs SET recoveries = 2, recovery_mark = 0"
            " WHERE workflow_id IN ('again', 'moved')"
        )
        conn.execute("UPDATE runs SET lease_expires_at = 300.0 WHERE workflow_id = 'live'")
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        with store._writer.connection() as conn:
            conn.pgconn.trace(out.fileno())
        try:
            results, batches = together(
                store,
                [
                    lambda wid=wid: _recover(store, wid)
                    for wid in ("again", "moved", "fresh", "live")
                ],
            )
        finally:
            with store._writer.connection() as conn:
                conn.pgconn.untrace()
    assert [(r.taken, r.recoveries) for r in results] == [
        (True, 3),
        (True, 1),
        (True, 1),
        (False, 0),
    ]
    assert batches == [4]
    answers = [line for line in trace.read_text().splitlines() if "ReadyForQuery" in line]
    assert len(answers) == 1
    assert _recovery_state(store, "again") == ("w2", 3, 0)
    assert _recovery_state(store, "moved") == ("w2", 1, 1)
    assert _recovery_state(store, "fresh") == ("w2", 1, 0)
    assert _recovery_state(store, "live") == ("w1", 0, None)
    assert [e.name for e in store.journal("again")] == ["started", "resumed"]
    assert [e.name for e in store.journal("live")] == ["started"]


def test_a_recovery_claim_locked_by_another_is_refused_alone(store: PostgresStore) -> None:
    for wid in ("locked", "free"):
        _held(store, wid)
    with store._pool.connection() as other, other.transaction():  # another claimant's lock
        other.execute("SELECT 1 FROM runs WHERE workflow_id = 'locked' FOR UPDATE")
        results, batches = together(
            store, [lambda: _recover(store, "locked"), lambda: _recover(store, "free")]
        )
    assert [(r.taken, r.recoveries) for r in results] == [(False, 0), (True, 1)]
    assert batches == [2]
    assert _recovery_state(store, "locked") == ("w1", 0, None)
    assert [e.name for e in store.journal("locked")] == ["started"]


def test_a_recovery_batch_whose_answer_was_lost_gives_each_its_count(
    store: PostgresStore,
) -> None:
    for wid in ("r1", "r2"):
        _held(store, wid)
    with store._pool.connection() as conn:
        conn.execute("UPDATE runs SET recoveries = 4, recovery_mark = 0 WHERE workflow_id = 'r1'")
    with _first_answer_lost(store) as lost:
        results, batches = together(
            store, [lambda: _recover(store, "r1"), lambda: _recover(store, "r2")]
        )
    assert lost == [1]
    assert [(r.taken, r.recoveries) for r in results] == [(True, 5), (True, 1)]
    assert batches == [2]
    assert [e.name for e in store.journal("r1")] == ["started", "resumed"]


def test_a_lone_claim_reads_the_replay_state_in_its_own_round_trip(
    store: PostgresStore, tmp_path: Path
) -> None:
    _held(store, "r")
    assert store.append("r", _step(1), owner="w1")
    marker = Entry(kind="run", name="rolling_back", status="completed", output=b"Jstop")
    assert store.append("r", marker, owner="w1")
    with store._pool.connection() as conn:  # parked, and due: a resume's claim
        conn.execute(
            "UPDATE runs SET status = 'suspended', lease_owner = NULL,"
            " lease_expires_at = NULL, wake_at = 150.0 WHERE workflow_id = 'r'"
        )
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        with store._writer.connection() as conn:
            conn.pgconn.trace(out.fileno())
        try:
            claim = _resume_claim(store)
        finally:
            with store._writer.connection() as conn:
                conn.pgconn.untrace()
    assert claim.taken
    assert claim.replay == store.replay_state("r")
    assert [row.name for row in claim.replay.index] == ["s"]
    assert claim.replay.rollback == b"Jstop"
    answers = [line for line in trace.read_text().splitlines() if "ReadyForQuery" in line]
    assert len(answers) == 1
    refused = _resume_claim(store, "w3", 201.0)
    assert (refused.taken, refused.replay) == (False, None)


def _wait_entry() -> Entry:
    return Entry(kind="wait", name="go", status="completed", seq=1, position="0", attempt=1)


def test_a_wait_decided_by_an_event_waits_for_the_server_twice(
    store: PostgresStore, tmp_path: Path
) -> None:
    _held(store, "r")
    sent = Entry(kind="event", name="go", status="completed")
    assert store.deliver_event("r", name="go", payload=b"J1", dedup_key=None, now=100.5, entry=sent)
    decide = functools.partial(
        store.resolve_wait, "r", _wait_entry(), owner="w1", event_name="go", now=101.0
    )
    decision, answers = traced_answers(store, tmp_path, decide)
    assert decision == WaitDecision("event", b"J1")
    assert answers == 2  # BEGIN with its questions, then the event consumed, journaled, COMMIT
    again, _ = traced_answers(store, tmp_path, decide)  # decided already: lost
    assert again == WaitDecision("lost")
    assert [e.name for e in store.journal("r")][-1] == "go"


def test_a_wait_decided_by_an_event_whose_commit_answer_was_lost_keeps_its_decision(
    store: PostgresStore,
) -> None:
    import psycopg

    _held(store, "r")
    sent = Entry(kind="event", name="go", status="completed")
    assert store.deliver_event("r", name="go", payload=b"J1", dedup_key=None, now=100.5, entry=sent)
    real = store._spelled_out
    lost: list[int] = []

    def commits_then_loses_the_answer(conn: Any, work: Any) -> Any:
        done = real(conn, work)  # committed: the event consumed, the winner journaled
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    store._spelled_out = commits_then_loses_the_answer  # type: ignore[method-assign]
    try:
        decision = store.resolve_wait("r", _wait_entry(), owner="w1", event_name="go", now=101.0)
    finally:
        del store._spelled_out
    assert lost == [1]
    assert decision == WaitDecision("event", b"J1")  # not "lost": the worker still holds the run
    # the event's delivery, then the wait's one entry: the retry did not decide it again
    assert [(e.kind, e.name) for e in store.journal("r")][1:] == [("event", "go"), ("wait", "go")]


def test_a_lone_claim_whose_commit_answer_was_lost_is_taken(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from stalwart._store import postgres

    _held(store, "r")
    with store._pool.connection() as conn:  # parked, and due: a resume's claim
        conn.execute(
            "UPDATE runs SET status = 'suspended', lease_owner = NULL,"
            " lease_expires_at = NULL, wake_at = 150.0 WHERE workflow_id = 'r'"
        )
    real = postgres.send_ahead
    lost: list[int] = []

    def commits_then_loses_the_answer(conn: Any, send: Any) -> Any:
        done = real(conn, send)  # committed: the claim landed
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    monkeypatch.setattr(postgres, "send_ahead", commits_then_loses_the_answer)
    claim = _resume_claim(store)
    assert lost == [1]
    assert (claim.taken, claim.recoveries) == (True, 0)  # the retry found it landed
    assert _recovery_state(store, "r")[0] == "w2"
    assert [e.name for e in store.journal("r")] == ["started", "resumed"]
