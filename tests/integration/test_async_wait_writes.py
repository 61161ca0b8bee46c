"""An async workflow's durable wait, and an async step's failed attempt, never hold the event
loop while their write waits for the database: the app's async runs share that loop, so a write
stuck behind another writer's lock (another process's write on SQLite, a transaction holding
the journal on PostgreSQL) would stall every one of them. The loop goes on meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import stalwart
from stalwart import testing
from store_urls import POSTGRES_URL

pytestmark = pytest.mark.timeout(90)

WAIT_S = 30.0  # for what surely happens
LOOK_S = 5.0  # how long the loop is given to run another task while the lock is held


async def _now_then(step: Any) -> Any:
    """A value recorded (journaled at the next boundary, the step), then the step."""
    stalwart.now()
    return await step()


# Each kind of wait, with a timeout already up: it opens (the write the lock holds back), then
# ends at once with its timer, so the run completes. "step": an async step whose first attempt
# fails (its failure is the write held back) and whose second succeeds. "child": starting a
# child run (the start's write, which also creates the child). "now": a recorded value,
# journaled before the step that follows it (that write is the one held back).
WAITS: dict[str, Callable[[Any], Awaitable[Any]]] = {
    "sleep": lambda _step: stalwart.sleep_async(0),
    "event": lambda _step: stalwart.wait_for_event_async("never", timeout=0),
    "approval": lambda _step: stalwart.request_approval_async("ship it?", timeout=0),
    "step": lambda step: step(),
    "child": lambda _step: stalwart.start_child_async("kid"),
    "now": _now_then,
}


# The store calls that make each one's held-back write (the first is this code's, the second
# the one a sync workflow makes).
WRITES = {"step": ("append_async", "append"), "child": ("start_child",), "now": ("append",)}


@contextlib.contextmanager
def writer_lock(url: str, *, then_take: str | None = None) -> Iterator[None]:
    """Another writer holding what the run's next write needs: SQLite's write lock (as
    another process writing), or the journal on PostgreSQL (as a long migration would). With
    ``then_take``, it holds the runs instead, and when the block ends it gives that run's lease
    to another worker, one already gone (its lease lapsed), before it lets the write through."""
    taking = "UPDATE runs SET lease_owner = 'elsewhere', lease_expires_at = 1 WHERE workflow_id = "
    if url.startswith("sqlite:///"):
        other = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            yield
            if then_take is not None:
                other.execute(taking + "?", (then_take,))
            other.execute("ROLLBACK" if then_take is None else "COMMIT")
        finally:
            other.close()
        return
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    with psycopg.connect(POSTGRES_URL, autocommit=False) as conn:
        conn.execute(f"SET search_path TO {schema}")
        # reads go on, writes wait (on runs: the lease's fence does)
        conn.execute(f"LOCK TABLE {'journal' if then_take is None else 'runs'} IN EXCLUSIVE MODE")
        yield
        if then_take is None:
            conn.rollback()
            return
        conn.execute(taking + "%s", (then_take,))
        conn.commit()


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_a_write_of_an_async_run_held_back_by_another_writer_leaves_the_loop_to_others(
    shared_url: str, kind: str
) -> None:
    began, armed, go, ticked, entered = (threading.Event() for _ in range(5))
    with stalwart.Stalwart(shared_url) as app:
        flaky, tries = observed_flaky(app, kind, entered)

        @app.workflow(name=f"waits-{kind}")
        async def waits() -> str:
            async def ticker() -> None:
                await asyncio.to_thread(go.wait, WAIT_S)
                ticked.set()  # on the loop, after the wait: only if the loop is free

            other = asyncio.ensure_future(ticker())
            began.set()
            await asyncio.to_thread(armed.wait, WAIT_S)
            await WAITS[kind](flaky)
            await other
            return "done"

        events = (began, armed, entered)
        with write_held(app, waits, "w", shared_url, *events, gates=(go,)) as results:
            go.set()
            assert ticked.wait(LOOK_S), "the loop was held while the write waited"
        assert results == ["done"]
        if kind == "now":
            kinds = [(e.kind, e.attempt, e.status) for e in app.journal("w") if e.seq is not None]
            assert kinds == [
                ("now", 1, "completed"),
                ("step", 1, "failed"),
                ("step", 2, "completed"),
            ]
        elif kind == "step":
            steps = [e for e in app.journal("w") if e.kind == "step"]
            assert [(e.attempt, e.status) for e in steps] == [(1, "failed"), (2, "completed")]
            assert tries == [1, 2]
        else:
            opened = [e.status for e in app.journal("w") if e.kind == kind]
            assert opened == (["scheduled"] if kind == "child" else ["scheduled", "completed"])


@contextlib.contextmanager
def write_held(
    app: stalwart.Stalwart,
    workflow: Any,
    workflow_id: str,
    url: str,
    *events: threading.Event,
    gates: tuple[threading.Event, ...] = (),
) -> Iterator[list[Any]]:
    """``app.run`` of ``workflow`` in a thread; once it began (``events``: began, armed,
    entered), another writer holds the database, the run goes on (armed), and the block runs
    while its write waits (it has entered): it is given the list the run's result will be in,
    still empty. Afterwards the lock goes, ``gates`` open, and the run is waited for."""
    began, armed, entered = events
    results: list[Any] = []
    running = threading.Thread(
        target=lambda: results.append(app.run(workflow, workflow_id=workflow_id))
    )
    running.start()
    try:
        assert began.wait(WAIT_S)
        with writer_lock(url):
            armed.set()
            assert entered.wait(WAIT_S), "the write never began"
            yield results
            assert not results
    finally:
        for gate in (armed, *gates):
            gate.set()
        running.join(WAIT_S)


def observed_flaky(
    app: stalwart.Stalwart, kind: str, entered: threading.Event
) -> tuple[Any, list[int]]:
    """Set ``entered`` as the store call making ``kind``'s held-back write begins; and a step
    whose first attempt fails, with the attempts it ran."""
    for name in WRITES.get(kind, ("open_wait",)):
        observe(app._runtime.store, name, entered)
    tries: list[int] = []

    @app.workflow(name="kid")
    async def kid() -> int:
        return 7

    @app.step(name="flaky", retry=stalwart.Retry(initial_delay=0, jitter=False))
    async def flaky() -> str:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            raise ConnectionError("503 from the provider")
        return "ok"

    return flaky, tries


def observe(store: Any, name: str, entered: threading.Event) -> None:
    """Set ``entered`` when the store's method ``name`` is called (its write has begun; it
    then waits for the lock)."""
    real = getattr(store, name)
    if asyncio.iscoroutinefunction(real):

        async def observed_async(*args: Any, **kwargs: Any) -> Any:
            entered.set()
            return await real(*args, **kwargs)

        setattr(store, name, observed_async)
    else:

        def observed(*args: Any, **kwargs: Any) -> Any:
            entered.set()
            return real(*args, **kwargs)

        setattr(store, name, observed)


@pytest.mark.parametrize("kind", ["sleep", "step", "child", "now"])
def test_a_cancellation_during_a_held_back_write_takes_effect_once_the_write_ends(
    shared_url: str, kind: str
) -> None:
    """A timeout that fires while the write waits does not end it (a write under way is not
    taken back) and is not lost either: once the write is made, the call raises, as it would
    have at its next ``await`` had the write blocked the loop. The step does not go on to
    another attempt; the wait stays recorded."""
    began, armed, entered = (threading.Event() for _ in range(3))
    tasks: list[asyncio.Task[Any]] = []
    with stalwart.Stalwart(shared_url) as app:
        flaky, tries = observed_flaky(app, kind, entered)

        @app.workflow(name=f"cancels-{kind}")
        async def cancels() -> str:
            task = asyncio.current_task()
            assert task is not None
            tasks.append(task)
            began.set()
            await asyncio.to_thread(armed.wait, WAIT_S)
            try:
                async with asyncio.timeout(0.2):
                    await WAITS[kind](flaky)
            except TimeoutError:
                return "timed out"
            return "went on"

        events = (began, armed, entered)
        with write_held(app, cancels, "c", shared_url, *events) as results:
            deadline = time.monotonic() + WAIT_S
            while tasks[0].cancelling() == 0:  # the timeout fired, the write still waits
                assert time.monotonic() < deadline, "the timeout never fired"
                time.sleep(0.01)
        assert results == ["timed out"]
        if kind == "now":
            assert tries == [], "the step ran after the cancellation"
            kinds = [(e.kind, e.status) for e in app.journal("c") if e.seq is not None]
            assert kinds == [("now", "completed")]
        elif kind == "step":
            assert tries == [1], "an attempt ran after the cancellation"
            steps = [e for e in app.journal("c") if e.kind == "step"]
            assert [(e.attempt, e.status) for e in steps] == [(1, "failed")]
        else:
            assert [e.status for e in app.journal("c") if e.kind == kind] == ["scheduled"]


def test_recording_how_a_child_ended_leaves_the_loop_to_others_while_the_write_waits(
    shared_url: str,
) -> None:
    """An async parent that learns its child's end journals it at the start's position: that
    write, held back by another writer, leaves the loop to the parent's other task; the parent
    then returns the child's result."""
    began, armed, go, ticked, entered = (threading.Event() for _ in range(5))
    executions: list[int] = []
    with stalwart.Stalwart(shared_url) as app:
        store: Any = app._runtime.store
        real = store.append

        def observed(*args: Any, **kwargs: Any) -> Any:
            if armed.is_set():  # the parent's replay, after its child ended
                entered.set()
            return real(*args, **kwargs)

        store.append = observed

        @app.workflow(name="kid")
        async def kid() -> int:
            return 7

        @app.workflow(name="parent")
        async def parent() -> int:
            handle = await stalwart.start_child_async("kid")
            executions.append(1)
            other = None
            if len(executions) > 1:  # the child ended: its end is journaled now

                async def ticker() -> None:
                    await asyncio.to_thread(go.wait, WAIT_S)
                    ticked.set()

                other = asyncio.ensure_future(ticker())
                began.set()
                await asyncio.to_thread(armed.wait, WAIT_S)
            value = int(await handle.result_async())
            if other is not None:
                await other
            return value

        events = (began, armed, entered)
        with write_held(app, parent, "p", shared_url, *events, gates=(go,)) as results:
            go.set()
            assert ticked.wait(LOOK_S), "the loop was held while the write waited"
        assert results == [7]
        ends = [(e.status, e.seq) for e in app.journal("p") if e.kind == "child"]
        assert [status for status, _seq in ends] == ["scheduled", "completed"]


def test_an_async_irreversible_step_that_timed_out_is_marked_in_doubt_before_verify_settles_it(
    shared_url: str,
) -> None:
    """An irreversible step's marks stay in order in an async workflow: scheduled, in doubt,
    then what ``verify`` found; a replay (after the durable sleep) runs ``verify`` no more."""
    verified: list[int] = []
    with stalwart.Stalwart(shared_url) as app:

        def verify() -> str:
            verified.append(1)
            return "charged"  # the effect happened

        @app.step(name="charge", irreversible=True, verify=verify, timeout=0.2)
        async def charge() -> str:
            await asyncio.sleep(WAIT_S)
            return "charged"

        @app.workflow(name="charges")
        async def charges() -> str:
            value = await charge()
            await stalwart.sleep_async(0.3)  # suspends: the run replays when it wakes
            return str(value)

        assert app.run(charges, workflow_id="i") == "charged"
        steps = [(e.status, e.by) for e in app.journal("i") if e.kind == "step"]
        assert steps == [("scheduled", None), ("in_doubt", None), ("completed", "verify")]
        assert verified == [1]


def test_closing_the_app_during_a_slow_wait_write_gives_the_run_back_at_once(
    shared_url: str,
) -> None:
    """``app.close()`` while a wait's write is slow (a database that takes longer than the
    close waits for its tasks) does not leave ``app.run`` waiting for ever: the run is given
    back as its loop closes, and the next ``app.run`` of it completes it."""
    entered, release = threading.Event(), threading.Event()
    app = stalwart.Stalwart(shared_url)
    store: Any = app._runtime.store
    real = store.open_wait

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(WAIT_S)  # a database that answers only after the app has closed
        return real(*args, **kwargs)

    store.open_wait = slow

    def naps_body() -> Any:
        async def naps() -> str:
            await stalwart.sleep_async(0)
            return "rested"

        return naps

    naps = app.workflow(name="naps")(naps_body())
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            outcome.append(app.run(naps, workflow_id="n"))
        except BaseException as exc:  # the test reads it
            outcome.append(exc)

    running = threading.Thread(target=run)
    running.start()
    try:
        assert entered.wait(WAIT_S), "the wait's write never began"
        app.close()
        running.join(WAIT_S)
        assert not running.is_alive(), "app.run still waits for a write of its closed app"
        (error,) = outcome
        assert isinstance(error, RuntimeError) and "event loop closed" in str(error), error
    finally:
        release.set()
        running.join(WAIT_S)
    with stalwart.Stalwart(shared_url) as again:
        assert again.run(again.workflow(name="naps")(naps_body()), workflow_id="n") == "rested"


def test_a_lease_lost_during_a_wait_write_wins_over_a_cancellation_that_came_meanwhile(
    shared_url: str,
) -> None:
    """A timeout fires while a wait's write is held back, and meanwhile another worker takes
    the run: the write finds the lease gone, and that wins. The workflow's code does not go on
    past the wait (where it would run a step as a stale holder); the run is recovered and its
    step runs once."""
    began, armed, entered = (threading.Event() for _ in range(3))
    tasks: list[asyncio.Task[Any]] = []
    saw: list[str] = []
    effects: list[int] = []
    with stalwart.Stalwart(shared_url) as app:
        observe(app._runtime.store, "open_wait", entered)

        @app.step(name="effect")
        async def effect() -> None:
            effects.append(1)

        @app.workflow(name="stale")
        async def stale() -> str:
            tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            began.set()
            await asyncio.to_thread(armed.wait, WAIT_S)
            try:
                async with asyncio.timeout(0.2):
                    await stalwart.sleep_async(0)
            except TimeoutError:
                saw.append("timed out")
            await effect()
            return "done"

        results: list[Any] = []
        running = threading.Thread(target=lambda: results.append(app.run(stale, workflow_id="s")))
        running.start()
        try:
            assert began.wait(WAIT_S)
            with writer_lock(shared_url, then_take="s"):
                armed.set()
                assert entered.wait(WAIT_S), "the write never began"
                deadline = time.monotonic() + WAIT_S
                while tasks[0].cancelling() == 0:  # the timeout fired, the write still waits
                    assert time.monotonic() < deadline, "the timeout never fired"
                    time.sleep(0.01)
        finally:
            armed.set()
            running.join(WAIT_S * 2)
        assert results == ["done"]
        assert saw == [], "the workflow went on past the wait after its lease was lost"
        assert effects == [1]


def test_a_recovery_whose_wait_write_a_cancellation_came_during_still_ends_the_recovery(
    shared_url: str,
) -> None:
    """A run taken over from a worker that died opens a wait; a timeout fires while the
    wait's write is held back. The write made, the recovery is over: the step the workflow
    runs next is a first attempt, not charged as one the dead worker was interrupted in."""
    began, armed, entered = (threading.Event() for _ in range(3))
    tasks: list[asyncio.Task[Any]] = []
    with stalwart.Stalwart(shared_url) as app:
        observe(app._runtime.store, "open_wait", entered)

        @app.step(name="after")
        async def after() -> str:
            return "ok"

        @app.workflow(name="recovered")
        async def recovered() -> str:
            tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            began.set()
            await asyncio.to_thread(armed.wait, WAIT_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    await stalwart.sleep_async(0)
            return str(await after())

        app.start(recovered, workflow_id="r")
        testing.execute_sql(  # as a worker that died while it ran the run leaves it
            testing.store_of(app),
            "UPDATE runs SET status = 'running', lease_owner = 'gone', lease_expires_at = 1"
            " WHERE workflow_id = :wid",
            {"wid": "r"},
        )
        with write_held(app, recovered, "r", shared_url, began, armed, entered) as results:
            deadline = time.monotonic() + WAIT_S
            while tasks[0].cancelling() == 0:  # the timeout fired, the write still waits
                assert time.monotonic() < deadline, "the timeout never fired"
                time.sleep(0.01)
        assert results == ["ok"]
        resumed = [e for e in app.journal("r") if e.kind == "run" and e.name == "resumed"]
        assert resumed, "the run was not taken over as a recovery"
        steps = [(e.attempt, e.status) for e in app.journal("r") if e.kind == "step"]
        assert steps == [(1, "completed")]
