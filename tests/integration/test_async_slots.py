"""A worker drives an async workflow's run as a task on the app's loop (``_slots.py``,
``Driver.drive_async``): a run that completes ends with a write that task awaits, and every
other ending is recorded by the code a sync run's goes through, in a thread of the pool.
Each ending here, on both shared stores, through a real worker serving in a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import stalwart
from serving import serving
from stalwart import testing
from stalwart._slots import Slots

pytestmark = pytest.mark.timeout(60)

WAIT_S = 20.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached within {WAIT_S}s")
        time.sleep(0.01)


def outcome(app: stalwart.Stalwart, workflow_id: str) -> tuple[str, Any]:
    handle = app.handle(workflow_id)
    try:
        return "completed", handle.result(timeout=WAIT_S)
    except stalwart.StalwartError as exc:
        return handle.status(), exc


@pytest.fixture
def app(shared_url: str) -> Iterator[stalwart.Stalwart]:
    with stalwart.Stalwart(shared_url) as instance:
        yield instance


def test_async_runs_complete_on_the_loop_with_their_results(app: stalwart.Stalwart) -> None:
    threads: set[str] = set()

    @app.step()
    async def double(n: int) -> int:
        return n * 2

    @app.workflow()
    async def twice(n: int) -> int:
        threads.add(threading.current_thread().name)
        return await double(await double(n))

    for i in range(40):
        app.start(twice, i, workflow_id=f"t{i}")
    with serving(app):
        results = [outcome(app, f"t{i}") for i in range(40)]
    assert results == [("completed", i * 4) for i in range(40)]
    assert threads == {"stalwart-loop"}
    journal = [(entry.kind, entry.status) for entry in app.journal("t3")]
    assert journal[2:] == [("step", "completed"), ("step", "completed"), ("run", "completed")]


@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
def test_a_slot_that_frees_is_filled_at_once_not_at_the_next_full_poll(
    app: stalwart.Stalwart, monkeypatch: pytest.MonkeyPatch, is_async: bool
) -> None:
    """A run that ends wakes the worker once its slot is free (not before: the worker would
    find none, and wait for its next full look at the store), so the next run starts at once."""
    monkeypatch.setattr("stalwart._worker.FULL_POLL_SECONDS", 3600.0)
    real_ended = Slots._ended

    def ended_later(self: Slots, *args: Any) -> None:
        time.sleep(0.2)  # as when the loop is busy with other runs: the slot frees later
        real_ended(self, *args)

    monkeypatch.setattr(Slots, "_ended", ended_later)

    if is_async:

        @app.workflow(name="one")
        async def one_async(n: int) -> int:
            return n

    else:

        @app.workflow(name="one")
        def one_sync(n: int) -> int:
            return n

    for i in range(4):
        app.start("one", i, workflow_id=f"o{i}")
    with serving(app, concurrency=1):
        results = [outcome(app, f"o{i}") for i in range(4)]
    assert results == [("completed", i) for i in range(4)]


def test_an_async_run_whose_input_is_stored_apart_completes(app: stalwart.Stalwart) -> None:
    @app.workflow()
    async def length(text: str) -> int:
        return len(text)

    app.start(length, "x" * 20_000, workflow_id="big")
    with serving(app):
        assert outcome(app, "big") == ("completed", 20_000)


def test_an_async_run_that_raises_fails_with_its_error(app: stalwart.Stalwart) -> None:
    @app.step()
    async def fine() -> str:
        return "ok"

    @app.workflow()
    async def broken() -> None:
        await fine()
        raise ValueError("no such order")

    app.start(broken, workflow_id="b")
    with serving(app):
        status, error = outcome(app, "b")
    assert status == "failed" and "no such order" in str(error)


def test_an_async_run_whose_result_cannot_be_stored_fails_saying_so(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow()
    async def unstorable() -> object:
        return object()

    app.start(unstorable, workflow_id="u")
    with serving(app):
        status, error = outcome(app, "u")
    assert status == "failed"
    assert isinstance(error, stalwart.WorkflowFailed) and "cannot be stored" in str(error)


def test_an_async_run_that_fails_rolls_back_its_compensable_steps(
    app: stalwart.Stalwart,
) -> None:
    undone: list[str] = []

    def refund(result: str, order: str) -> None:
        undone.append(result)

    @app.step(compensate=refund)
    async def charge(order: str) -> str:
        return f"charge-{order}"

    @app.workflow()
    async def checkout(order: str) -> None:
        await charge(order)
        raise RuntimeError("shipping failed")

    app.start(checkout, "o1", workflow_id="c")
    with serving(app):
        status, _error = outcome(app, "c")
    assert status == "failed"
    assert undone == ["charge-o1"]


def test_an_async_run_that_waits_suspends_and_completes_when_woken(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow()
    async def waiting() -> Any:
        return await stalwart.wait_for_event_async("go")

    app.start(waiting, workflow_id="w")
    with serving(app):
        wait_until(lambda: app.handle("w").status() == "suspended", "the run suspends")
        app.send_event("w", "go", {"n": 1})
        assert outcome(app, "w") == ("completed", {"n": 1})


def test_an_async_run_cancelled_while_it_waits_ends_cancelled(app: stalwart.Stalwart) -> None:
    @app.workflow()
    async def waiting() -> Any:
        return await stalwart.wait_for_event_async("never")

    app.start(waiting, workflow_id="x")
    with serving(app):
        wait_until(lambda: app.handle("x").status() == "suspended", "the run suspends")
        app.handle("x").cancel()
        wait_until(lambda: app.handle("x").status() == "cancelled", "the run is cancelled")


def test_an_async_run_cancelled_mid_step_ends_cancelled_at_its_next_boundary(
    app: stalwart.Stalwart,
) -> None:
    entered = threading.Event()

    @app.step(name="slow")
    async def slow() -> None:
        entered.set()
        await asyncio.sleep(0.5)  # the cancel comes meanwhile

    @app.step()
    async def after() -> str:
        return "should not run"

    @app.workflow()
    async def long() -> str:
        await slow()
        return await after()

    app.start(long, workflow_id="m")
    with serving(app):
        assert entered.wait(WAIT_S)
        app.handle("m").cancel()
        wait_until(lambda: app.handle("m").status() == "cancelled", "the run is cancelled")
    assert [e.name for e in app.journal("m") if e.kind == "step"] == ["slow"]


def test_a_worker_stopping_gives_an_async_run_back_at_its_next_step(
    app: stalwart.Stalwart,
) -> None:
    entered = threading.Event()
    release = threading.Event()

    @app.step(name="hold")
    async def hold() -> None:
        entered.set()
        while not release.is_set():
            time.sleep(0.005)

    @app.step()
    async def then() -> str:
        return "done"

    @app.workflow()
    async def held() -> str:
        await hold()
        return await then()

    app.start(held, workflow_id="h")
    worker = testing.worker(app, concurrency=2)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    assert entered.wait(WAIT_S)
    worker.stop()
    release.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert app.handle("h").status() == "pending"  # given back, its step journaled
    assert [e.name for e in app.journal("h") if e.kind == "step"] == ["hold"]
    with serving(app):
        assert outcome(app, "h") == ("completed", "done")


@pytest.mark.parametrize("how", ["awaited", "own", "own-unawaited"])
def test_a_cancellation_the_workflow_raises_itself_fails_the_run_once(
    app: stalwart.Stalwart, how: str
) -> None:
    """Not a cancellation of the run's task by the loop closing, which gives the run back:
    the workflow awaited a task it cancelled, or cancelled its own (and awaited something
    after, or returned), so it fails, and is not executed again."""
    executions: list[str] = []

    @app.workflow()
    async def self_cancelling() -> None:
        executions.append("x")
        if how == "awaited":
            child = asyncio.ensure_future(asyncio.sleep(10))
            child.cancel()
            await child
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        if how == "own":
            await asyncio.sleep(0)

    app.start(self_cancelling, workflow_id="sc")
    with serving(app):
        status, _error = outcome(app, "sc")
    assert status == "failed"
    assert executions == ["x"]


def test_async_runs_claimed_once_the_apps_loop_is_gone_are_given_back_at_once(
    app: stalwart.Stalwart, shared_url: str
) -> None:
    """The app closed its loop between a claim and the start of the runs it took: each is
    given back at once (no slot held, its lease released), and a sync run of the same claim
    starts as usual; a worker whose app has a loop then completes them."""

    def declare(on: stalwart.Stalwart) -> Any:
        @on.workflow(name="late")
        async def late() -> str:
            return "late"

        @on.workflow(name="plain")
        def plain() -> str:
            return "done"

        return late, plain

    late, plain = declare(app)
    app.start(late, workflow_id="late-1")
    app.start(late, workflow_id="late-2")
    app.start(plain, workflow_id="plain")
    worker = testing.worker(app, concurrency=4)
    driver = app._driver
    driver.runtime.loop.close()
    rows = [driver.row(wid) for wid in ("late-1", "plain", "late-2")]
    with ThreadPoolExecutor(4) as pool:
        assert worker._start_all(rows, pool) == [False, True, False]
    assert outcome(app, "plain") == ("completed", "done")
    wait_until(lambda: len(worker.slots) == 0, "every slot free")
    assert [driver.row(wid).lease_owner for wid in ("late-1", "late-2")] == [None, None]
    with stalwart.Stalwart(shared_url) as other:
        declare(other)
        with serving(other):
            assert outcome(other, "late-1") == ("completed", "late")
            assert outcome(other, "late-2") == ("completed", "late")
