"""An async workflow's recorded values (``stalwart.now()``, ``uuid4()``, ``random()``) are
journaled at its next boundary, off the event loop, not at the call: the loop the app's async
runs share never waits for the database there, and still nothing that leaves a trace (a
step, a wait, a child, the run's end) happens before the value it may use is journaled."""

from __future__ import annotations

import threading
import time
from typing import Any

import stalwart
from stalwart import testing


def _values(app: stalwart.Stalwart, workflow_id: str) -> list[tuple[str, Any]]:
    return [(e.kind, e.output) for e in app.journal(workflow_id) if e.seq is not None]


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
