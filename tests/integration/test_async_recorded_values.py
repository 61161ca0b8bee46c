"""An async workflow's recorded values (``stalwart.now()``, ``uuid4()``, ``random()``) are
journaled at its next boundary, off the event loop, not at the call: the loop the app's async
runs share never waits for the database there, and still nothing that leaves a trace (a
step, a wait, a child, the run's end) happens before the value it may use is journaled."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest

import stalwart
from lease_loss import lease_lost_warnings
from stalwart import testing


def _values(app: stalwart.Stalwart, workflow_id: str) -> list[tuple[str, Any]]:
    return [(e.kind, e.output) for e in app.journal(workflow_id) if e.seq is not None]


def _fail_first_write_of_now(app: stalwart.Stalwart, *, after: float = 0.0) -> list[int]:
    """Make the store fail the first write of a ``now`` entry (``after`` seconds in); the list
    it returns holds one item once it has."""
    store: Any = testing.store_of(app)
    real = store.append
    failures: list[int] = []

    def fails_once(workflow_id: str, entry: Any, **kwargs: Any) -> Any:
        if entry.kind == "now" and not failures:
            failures.append(1)
            time.sleep(after)
            raise stalwart.StoreError("a transient outage")
        return real(workflow_id, entry, **kwargs)

    store.append = fails_once
    return failures


def test_a_value_is_journaled_before_the_step_that_follows_it_runs(
    app: stalwart.Stalwart,
) -> None:
    seen: list[list[str]] = []

    @app.step()
    async def look() -> None:  # what the journal holds as the step begins
        seen.append([kind for kind, _ in _values(app, "a")])

    @app.workflow()
    async def records_then_steps() -> float:
        moment = stalwart.now().timestamp()
        await look()
        return moment

    moment = app.run(records_then_steps, workflow_id="a")
    assert seen == [["now"]]
    journal = _values(app, "a")
    assert [kind for kind, _ in journal] == ["now", "step"]
    assert app.run(records_then_steps, workflow_id="a") == moment  # its result, recorded


def test_values_recorded_just_before_the_end_are_journaled_with_it_in_order(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow()
    async def three_values() -> list[Any]:
        return [str(stalwart.uuid4()), stalwart.random(), stalwart.now().timestamp()]

    values = app.run(three_values, workflow_id="v")
    journal = [e for e in app.journal("v") if e.seq is not None]
    assert [(e.kind, e.seq) for e in journal] == [("uuid", 1), ("random", 2), ("now", 3)]
    assert [str(journal[0].output), journal[1].output] == values[:2]
    assert not testing.store_of(app).get_run("v").lease_owner


def test_a_value_recorded_before_a_wait_is_the_same_after_it(app: stalwart.Stalwart) -> None:
    """The value is journaled before the wait suspends the run; the execution that resumes
    it replays the value rather than drawing a new one."""
    drawn: list[float] = []

    @app.workflow()
    async def draws_then_waits() -> float:
        value = stalwart.random()
        drawn.append(value)
        await stalwart.wait_for_event_async("go", timeout=600)
        return value

    def send_once_suspended() -> None:
        deadline = time.monotonic() + 30
        while (run := testing.store_of(app).get_run("s")) is None or run.status != "suspended":
            assert time.monotonic() < deadline, "the run never suspended"
            time.sleep(0.01)
        app.send_event("s", "go", None)

    sender = threading.Thread(target=send_once_suspended)
    sender.start()
    value = app.run(draws_then_waits, workflow_id="s")
    sender.join(30)
    assert len(drawn) == 2 and drawn[0] == drawn[1] == value  # run, then resumed
    kinds = [e.kind for e in app.journal("s") if e.seq is not None]
    assert kinds[:2] == ["random", "event"]


def test_a_task_waits_for_the_value_another_task_is_journaling(app: stalwart.Stalwart) -> None:
    """``v = now()`` then two gathered steps given ``v``: the first task's step call writes
    the value, and the second's waits for that write, even with nothing left to take."""
    seen: dict[str, list[str]] = {}
    step_b_began = threading.Event()
    store: Any = testing.store_of(app)
    real = store.append

    def held(workflow_id: str, entry: Any, **kwargs: Any) -> Any:
        if entry.kind == "now":
            step_b_began.wait(0.5)  # long enough for step b to begin, were it let
        return real(workflow_id, entry, **kwargs)

    store.append = held

    @app.step()
    async def a(value: float) -> None:
        seen["a"] = [kind for kind, _ in _values(app, "g")]

    @app.step()
    async def b(value: float) -> None:
        step_b_began.set()
        seen["b"] = [kind for kind, _ in _values(app, "g")]

    @app.workflow()
    async def shares_a_value() -> None:
        value = stalwart.now().timestamp()
        await asyncio.gather(a(value), b(value))

    app.run(shares_a_value, workflow_id="g")
    assert "now" in seen["a"] and "now" in seen["b"]


def test_a_value_whose_write_failed_is_journaled_before_what_waited_for_it(
    app: stalwart.Stalwart,
) -> None:
    """The store fails the first write of a value while another task's shared-context write
    waits for it: that write does not go ahead of the value, which is journaled first."""
    failures = _fail_first_write_of_now(app, after=0.2)  # the shared write waits meanwhile

    @app.step()
    async def a(value: float) -> None:
        return None

    @app.workflow()
    async def shares_it() -> str:
        value = stalwart.now().timestamp()

        async def other() -> None:
            await asyncio.sleep(0.05)  # the step's flush of the value is under way
            stalwart.random()
            stalwart.shared_set("k", value)

        await asyncio.gather(a(value), other())
        return "done"

    with contextlib.suppress(stalwart.StoreError):
        app.run(shares_it, workflow_id="f")
    assert app.run(shares_it, workflow_id="f") == "done"
    order = [e.kind for e in app.journal("f") if e.seq is not None]
    assert failures == [1] and order.index("now") < order.index("shared")


def test_a_lost_leases_warning_names_no_recorded_value_as_a_step_that_ran(
    app: stalwart.Stalwart, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    @app.step()
    async def later() -> None:
        return None

    @app.workflow()
    async def loses_its_lease() -> None:
        stalwart.now()
        stalwart.uuid4()
        clock.advance(testing.runtime_of(app).lease_seconds + 1)  # its renewals stalled
        await asyncio.to_thread(testing.claim_run, app, "l")  # another worker took it
        await later()

    lost = lease_lost_warnings(app, loses_its_lease, "l", caplog)
    assert not any("ran and may have had its effect" in message for message in lost), lost


def test_a_value_an_in_place_flush_failed_to_write_stays_owed(app: stalwart.Stalwart) -> None:
    """A task's ``emit`` flushes the value in place and the store fails that write; the task
    fails, its sibling goes on with the value: the value is written before the sibling's step,
    so the run's journal holds the value every step used."""
    failures = _fail_first_write_of_now(app)
    used: list[float] = []

    @app.step()
    async def charge(value: float) -> None:
        used.append(value)

    @app.workflow()
    async def owes_a_value() -> float:
        value = stalwart.now().timestamp()

        async def progress() -> None:
            stalwart.emit("working")

        async def work() -> None:
            await asyncio.sleep(0)  # after progress() met the failure
            await charge(value)

        await asyncio.gather(progress(), work(), return_exceptions=True)
        return value

    value = app.run(owes_a_value, workflow_id="o")
    assert failures == [1] and used == [value]
    journal = [(e.kind, e.seq) for e in app.journal("o") if e.seq is not None]
    assert journal == [("now", 1), ("step", 2)]
