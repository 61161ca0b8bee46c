"""What only the PostgreSQL store has to get right: lost acknowledgements, URLs of its own."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import stalwart
from stalwart._clock import ServerClock
from stalwart._store import Entry, open_store
from stalwart._store.postgres import PostgresStore
from stalwart.testing import FakeClock, claim_run, runtime_of, store_of
from store_urls import postgres_schema_url


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


def _held_run(store: PostgresStore, workflow_id: str) -> Entry:
    """Create run ``workflow_id``, running and held by ``w``; the entry that started it."""
    started = Entry(kind="run", name="started", status="completed", started_at=1.0)
    store.create_run(
        workflow_id=workflow_id,
        name="agent",
        status="running",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=1.0,
        owner="w",
        lease_until=100.0,
        entry=started,
    )
    return started


def test_an_append_whose_acknowledgement_was_lost_is_recorded_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        _held_run(store, "r")
        real = store._insert_entry
        lost: list[int] = []

        def commits_then_loses_the_ack(conn: Any, name: str, params: dict[str, Any]) -> bool:
            import psycopg

            done = real(conn, name, params)  # autocommitted: it landed
            if not lost:
                lost.append(1)
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return done

        monkeypatch.setattr(store, "_insert_entry", commits_then_loses_the_ack)
        step = Entry(
            kind="step",
            name="charge",
            status="completed",
            seq=1,
            position="0",
            attempt=1,
            started_at=2.0,
            finished_at=3.0,
            output=b"J1",
        )
        assert store.append("r", step, owner="w")
        assert lost == [1]
        rows = [r for r in store.journal("r") if r.kind == "step"]
        assert [(r.seq, r.status) for r in rows] == [(1, "completed")]
    finally:
        store.close()


def test_a_lone_run_waits_for_the_server_once_a_transaction(pg_url: str, tmp_path: Any) -> None:
    """A one-step run's two transactions are each sent whole (BEGIN, statements, COMMIT) and
    answered once: two answers from the server, not one a statement."""
    with stalwart.Stalwart(pg_url) as app:

        @app.step
        def double(x: int) -> int:
            return 2 * x

        @app.workflow
        def one_step(x: int) -> int:
            return double(x)

        assert app.run(one_step, 1, workflow_id="warm-up") == 2
        store = store_of(app)
        assert isinstance(store, PostgresStore)
        trace = tmp_path / "libpq.trace"
        with trace.open("w") as out:
            with store._writer.connection() as conn:  # the pipeline's one connection
                conn.pgconn.trace(out.fileno())
            try:
                assert app.run(one_step, 21, workflow_id="counted") == 42
            finally:
                with store._writer.connection() as conn:
                    conn.pgconn.untrace()
        answers = [line for line in trace.read_text().splitlines() if "ReadyForQuery" in line]
        assert len(answers) == 2
        assert [e.kind for e in app.journal("counted")] == ["run", "step", "run"]


def test_a_write_sent_ahead_whose_answer_was_lost_is_recorded_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stalwart._store import postgres

    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    real = postgres.send_ahead
    lost: list[int] = []

    def commits_then_loses_the_answer(conn: Any, send: Any) -> Any:
        import psycopg

        done = real(conn, send)  # committed: it landed
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    monkeypatch.setattr(postgres, "send_ahead", commits_then_loses_the_answer)
    try:
        _held_run(store, "r")
        assert lost == [1]
        assert [e.name for e in store.journal("r")] == ["started"]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("schema=bad-name", "plain SQL identifier"),
        ("schema=Mixed", "lowercase"),
        ("pool_size=1", "pool_size"),
    ],
)
def test_our_url_parameters_are_checked(pg_url: str, query: str, match: str) -> None:
    base = pg_url.split("?", maxsplit=1)[0]
    with pytest.raises(stalwart.StoreError, match=match):
        stalwart.Stalwart(f"{base}?{query}")


def test_a_schema_parameter_isolates_fleets_sharing_a_database(pg_url: str) -> None:
    other = pg_url.replace("schema=t_", "schema=u_")
    try:
        with stalwart.Stalwart(pg_url) as a, stalwart.Stalwart(other) as b:

            @a.workflow(name="wf")
            def wf_a() -> str:
                return "a"

            @b.workflow(name="wf")
            def wf_b() -> str:
                return "b"

            assert a.run(wf_a, workflow_id="same") == "a"
            assert b.run(wf_b, workflow_id="same") == "b"
            assert [r.workflow_id for r in a.list_workflows()] == ["same"]
    finally:
        import psycopg

        schema = other.split("schema=")[1]
        with psycopg.connect(pg_url.split("?", maxsplit=1)[0], autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_fleet_reads_time_by_the_servers_clock(pg_url: str) -> None:
    with stalwart.Stalwart(pg_url) as app:
        clock = runtime_of(app).clock
        assert isinstance(clock, ServerClock)
        offset = store_of(app).clock_offset()  # type: ignore[attr-defined]
        assert offset is not None and abs(offset) < 1.0  # one machine: the same clock
        assert abs(clock.time() - time.time() - clock.offset) < 0.1


@contextmanager
def _acks_lost_once(store: PostgresStore, verbs: list[str]) -> Iterator[None]:
    """The first call of each of ``verbs`` commits, then reports a lost connection."""
    import psycopg

    real = store._connection
    armed = threading.local()

    @contextmanager
    def flaky() -> Iterator[Any]:
        with real() as conn:
            yield conn
        if getattr(armed, "on", False):
            armed.on = False
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    def arm(verb: str) -> None:
        call = getattr(store, verb)

        def armed_call(*args: Any, **kwargs: Any) -> Any:
            armed.on = True
            return call(*args, **kwargs)

        setattr(store, verb, armed_call)

    store._connection = flaky  # type: ignore[method-assign]
    for verb in verbs:
        arm(verb)
    yield


def test_operator_calls_and_claims_retried_after_a_lost_acknowledgement_act_once(
    pg_url: str,
) -> None:
    with stalwart.Stalwart(pg_url) as app:
        store = store_of(app)
        assert isinstance(store, PostgresStore)

        @app.workflow(name="asker")
        def asker() -> list[Any]:
            first = stalwart.wait_for_event("go", timeout=60)
            second = stalwart.wait_for_event("go", timeout=0.5)
            return [first, second, stalwart.request_approval("ok?").approved]

        @app.workflow(name="idle")
        def idle() -> int:
            return 1

        with _acks_lost_once(store, ["deliver_event", "decide_approval", "cancel_run"]):
            run = app.start(asker, workflow_id="asker")
            runner = threading.Thread(
                target=app.run, args=(asker,), kwargs={"workflow_id": "asker"}
            )
            runner.start()
            app.send_event("asker", "go", "once")  # one send: one event, consumed once
            deadline = time.monotonic() + 30
            while not app.approvals() and time.monotonic() < deadline:
                time.sleep(0.05)
            app.approve("asker", by="alice")  # no "already decided": the decision is ours
            runner.join(30)
            assert run.result(timeout=5) == ["once", None, True]
            waiting = app.start(idle, workflow_id="idle")
            app.cancel("idle")  # no "nothing to cancel": the cancel was ours
            assert waiting.status() == "cancelled"

        with _acks_lost_once(store, ["take_lease"]):
            app.start(idle, workflow_id="claimed")
            row = store.get_run("claimed")
            assert row is not None
            taken = claim_run(app, "claimed")
            assert taken is not None  # the claim landed: this caller holds the run
            assert store.get_run("claimed").lease_owner == taken  # type: ignore[union-attr]


def test_an_error_of_the_statement_is_not_an_outage(pg_url: str) -> None:
    with stalwart.Stalwart(pg_url) as app:

        @app.workflow(name="idle")
        def idle() -> int:
            return 1

        app.start(idle, workflow_id="somebody")
        store = store_of(app)
        started = time.monotonic()
        with pytest.raises(stalwart.StoreError, match="index row"):
            store.deliver_event(  # a dedup key far beyond what an index row holds
                "somebody",
                name="x",
                payload=None,
                dedup_key=os.urandom(5000).hex(),  # random: it does not compress
                now=1.0,
                entry=Entry(kind="event", name="x", status="completed"),
            )
        assert time.monotonic() - started < 5  # raised at once, not retried as an outage


def test_a_retry_after_a_connection_lost_before_commit_is_not_fooled_by_a_twin_entry(
    pg_url: str,
) -> None:
    """Two sends at the same instant write look-alike journal entries; the second one, whose
    connection is lost before its commit, must not take the first one's entry for its own."""
    clock = FakeClock()
    with stalwart.Stalwart(pg_url, clock=clock) as app:
        store = store_of(app)
        assert isinstance(store, PostgresStore)
        real_write = store._write
        armed = {"on": False}

        def write_then_lose_connection(work: Any) -> Any:
            def wrapped(conn: Any) -> Any:
                out = work(conn)
                if armed["on"]:
                    armed["on"] = False
                    conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
                return out

            return real_write(wrapped)

        store._write = write_then_lose_connection  # type: ignore[method-assign]

        @app.workflow(name="waiter")
        def waiter() -> list[Any]:
            return [stalwart.wait_for_event("a"), stalwart.wait_for_event("b")]

        handle = app.start(waiter, workflow_id="twins")
        app.send_event("twins", "a", 1)
        armed["on"] = True
        app.send_event("twins", "b", 2)  # the same FakeClock instant as "a"
        assert not armed["on"]
        store._write = real_write  # type: ignore[method-assign]
        sent = [e.name for e in app.journal("twins") if e.kind == "operator"]
        assert sent == ["send-event", "send-event"]
        assert app.run(waiter, workflow_id="twins") == [1, 2]
        assert handle.status() == "completed"


def test_a_server_closing_an_idle_connection_is_not_an_error(pg_url: str) -> None:
    with stalwart.Stalwart(f"{pg_url}&options=-c%20idle_session_timeout%3D500") as app:

        @app.workflow(name="idle")
        def idle() -> int:
            return 1

        app.start(idle, workflow_id="before")
        time.sleep(1.2)  # the server closes the pooled connections that sat idle
        app.start(idle, workflow_id="after")
        assert {r.workflow_id for r in app.list_workflows()} == {"before", "after"}


def test_a_parent_suspending_on_a_child_as_the_child_ends_is_woken(pg_url: str) -> None:
    """READ COMMITTED: the parent's suspend must not miss a child's end that commits while
    it checks (the child's wake-up found the parent still running, so it woke nobody).

    The child's result is stored apart, so its end goes statement by statement and the hook
    below holds it between its wake-up and its commit (a lone end with an inline result goes
    to the server whole, where nothing can run between the two)."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        started = _held_run(store, "p")
        spec = Entry(kind="child", name="kid", status="scheduled", seq=1, position="0")
        assert (
            store.start_child(
                "p",
                spec,
                owner="w",
                workflow_id="p/0",
                name="kid",
                queue="default",
                input=b"Jnull",
                now=2.0,
                started=started,
            )
            == "started"
        )
        assert store.take_lease(
            "p/0", owner="w2", expected_owner=None, now=3.0, lease_until=100.0
        ).taken
        real_wake = store._wake_parent
        woke, go = threading.Event(), threading.Event()

        def wake_then_hold(conn: Any, workflow_id: str, now: float) -> None:
            real_wake(conn, workflow_id, now)  # the parent still runs: it wakes nobody
            woke.set()
            go.wait(30)  # the child's end is not committed yet

        store._wake_parent = wake_then_hold  # type: ignore[method-assign]
        ended = Entry(kind="run", name="finished", status="completed")
        child = threading.Thread(
            target=store.finish_run,
            args=("p/0",),
            kwargs={
                "owner": "w2",
                "status": "completed",
                "output": b'J"' + b"x" * 5000 + b'"',
                "error": None,
                "now": 4.0,
                "entry": ended,
            },
        )
        child.start()
        assert woke.wait(30)
        suspended: list[bool] = []
        parent = threading.Thread(
            target=lambda: suspended.append(
                store.suspend_run("p", owner="w", wake_at=None, waiting_for="child:p/0", now=5.0)
            )
        )
        parent.start()
        parent.join(0.5)  # with the fix it waits for the child's row
        go.set()
        child.join(30)
        parent.join(30)
        assert suspended == [False]  # it saw the child's end instead of sleeping through it
        row = store.get_run("p")
        assert row is not None and row.status == "running"
    finally:
        store.close()


def test_a_shared_write_retried_after_a_lost_acknowledgement_reports_what_it_did(
    pg_url: str,
) -> None:
    """Its compare-and-set committed; the retry finds the write (or the journal entry) it made
    instead of failing the compare-and-set against its own write."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        with _acks_lost_once(store, ["write_shared"]):
            plain = store.write_shared("plan", b"J1", if_version=0, by="alice", now=1.0)
        assert (plain.held, plain.version) == (True, 1)
        _held_run(store, "r")
        entry = Entry(kind="shared", name="plan", status="completed", seq=1, position="0")
        with _acks_lost_once(store, ["write_shared"]):
            journaled = store.write_shared(
                "plan",
                b"J2",
                if_version=1,
                by="r",
                now=2.0,
                workflow_id="r",
                owner="w",
                entry=entry,
                encode_result=lambda version: f"J{version}".encode(),
            )
        assert (journaled.held, journaled.version) == (True, 2)
        assert [row.version for row in store.shared_history("plan")] == [1, 2]
        assert [(r.kind, r.output) for r in store.journal("r") if r.kind == "shared"] == [
            ("shared", b"J2")
        ]
    finally:
        store.close()


def test_a_claim_lost_to_another_worker_logs_no_warning(
    pg_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers racing for a run is routine: the loser's claim, sent ahead and refused by
    the server, logs nothing. psycopg used to warn "error ignored terminating Pipeline" when
    the refusal arrived while the claim's last statements were still being sent (the chaos
    soak found it); a pause before the claim's journal entry makes that the case here."""
    with stalwart.Stalwart(pg_url) as first, stalwart.Stalwart(pg_url) as second:
        raced = first.workflow(name="raced")(lambda: 1)
        second.workflow(name="raced")(lambda: 1)
        first.start(raced, workflow_id="raced-1")
        store = store_of(second)
        seen_pending = store.get_run("raced-1")  # the loser read it before the winner took it
        assert seen_pending is not None and seen_pending.status == "pending"
        caplog.set_level(logging.WARNING)
        assert claim_run(first, "raced-1") is not None
        journal_in = store._journal_in  # type: ignore[attr-defined]

        def late_journal_in(*args: Any) -> None:
            time.sleep(0.3)  # the server's refusal of the claim arrives meanwhile
            journal_in(*args)

        monkeypatch.setattr(store, "_journal_in", late_journal_in)
        runtime = second._runtime
        workflow = runtime.registry.workflows["raced"]
        assert second._driver.take(workflow, seen_pending, runtime.clock.time()) is None
        held = store.get_run("raced-1")
        assert held is not None and held.status == "running"  # the winner's, untouched
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_session_frozen_inside_a_transaction_is_ended_and_frees_its_rows(pg_url: str) -> None:
    """A process frozen mid-transaction (SIGSTOP, a paused VM) would hold its run's row lock
    until it resumed: the server ends such a session (``idle_in_transaction_session_timeout``,
    here 1 s from the URL), another store's write to that run goes through, and the frozen
    store's next call works on a fresh connection."""
    frozen_url = f"{pg_url}&options=-c%20idle_in_transaction_session_timeout%3D1000"
    frozen, other = open_store(frozen_url), open_store(pg_url)
    assert isinstance(frozen, PostgresStore)
    locked, thaw = threading.Event(), threading.Event()
    after_thaw: list[BaseException] = []

    def freeze_holding_the_row() -> None:
        with frozen._connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT 1 FROM runs WHERE workflow_id = 'r' FOR UPDATE")
            locked.set()
            thaw.wait(60)  # frozen: nothing is sent while the transaction is open
            try:
                conn.execute("SELECT 1")
            except Exception as exc:  # the server ended the session meanwhile
                after_thaw.append(exc)

    try:
        _held_run(frozen, "r")
        freezer = threading.Thread(target=freeze_holding_the_row, daemon=True)
        freezer.start()
        assert locked.wait(30)
        # blocks on the row lock until the server ends the frozen session
        assert other.release_lease("r", owner="w", now=2.0) is True
        thaw.set()
        freezer.join(30)
        assert len(after_thaw) == 1, "the frozen session was still open"
        row = frozen.get_run("r")
        assert row is not None and row.lease_owner is None
    finally:
        thaw.set()
        frozen.close()
        other.close()


def test_a_transaction_whose_session_the_server_ended_while_idle_is_retried(pg_url: str) -> None:
    """The server ends a session idle mid-transaction (the bound, 1 s here): that try was
    rolled back, and the write is done again on another connection, as after any lost
    connection, not reported as the store failing."""
    store = open_store(f"{pg_url}&options=-c%20idle_in_transaction_session_timeout%3D1000")
    assert isinstance(store, PostgresStore)
    tries: list[int] = []

    def write(conn: Any) -> int:
        tries.append(1)
        conn.execute("SELECT 1 FROM runs WHERE workflow_id = 'r' FOR UPDATE")
        if len(tries) == 1:
            time.sleep(1.5)  # frozen mid-transaction, past the bound
        conn.execute("UPDATE runs SET priority = 5 WHERE workflow_id = 'r'")
        return len(tries)

    try:
        _held_run(store, "r")
        assert store._write(write) == 2
        row = store.get_run("r")
        assert row is not None and row.priority == 5
    finally:
        store.close()


def test_a_sessions_idle_transaction_bound_is_a_minute_unless_the_url_says(pg_url: str) -> None:
    for url, expected in [
        (pg_url, "1min"),
        (f"{pg_url}&options=-c%20idle_in_transaction_session_timeout%3D0", "0"),
        (f"{pg_url}&options=--idle-in-transaction-session-timeout%3D90000", "90s"),
        (f"{pg_url}&options=-c%20statement_timeout%3D0", "1min"),
    ]:
        store = open_store(url)
        assert isinstance(store, PostgresStore)
        try:
            with store._connection() as conn:
                shown = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
            assert shown == (expected,)
        finally:
            store.close()
