"""Steps without a decorator: ``stalwart.run_step`` journals one call of any callable under a
name, with the semantics of a declared step."""

from __future__ import annotations

from typing import Any

import pytest

import stalwart
from stalwart.testing import FakeClock


def test_a_run_step_is_journaled_and_replayed_not_called_again(app: stalwart.Stalwart) -> None:
    calls: list[str] = []
    fail = {"ship": True}

    def lookup(order: str, *, region: str) -> dict[str, Any]:
        calls.append(order)
        return {"order": order, "region": region}

    @app.step(retry=stalwart.Retry.never())
    def ship(found: dict[str, Any]) -> str:
        if fail["ship"]:
            raise ConnectionError("courier down")
        return f"shipped {found['order']}"

    @app.workflow
    def agent(order: str) -> str:
        found = stalwart.run_step("lookup", lookup, args=(order,), kwargs={"region": "eu"})
        return ship(found)

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(agent, "o-1", workflow_id="o-1")
    fail["ship"] = False
    app.retry("o-1")
    assert app.run(agent, "o-1", workflow_id="o-1") == "shipped o-1"
    assert calls == ["o-1"]  # replayed from the journal the second time
    steps = [(e.name, e.status) for e in app.journal("o-1") if e.kind == "step"]
    assert steps[0] == ("lookup", "completed")
    entry = next(e for e in app.journal("o-1") if e.name == "lookup")
    assert entry.input == {"args": ["o-1"], "kwargs": {"region": "eu"}}
    assert entry.idempotency_key is not None


def test_outside_a_workflow_it_just_calls(app: stalwart.Stalwart) -> None:
    assert stalwart.run_step("add", lambda a, b: a + b, args=(2, 3)) == 5


def test_retry_timeout_and_the_step_context_work_as_on_a_declared_step(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    seen: list[tuple[int, str]] = []

    def flaky() -> str:
        seen.append((stalwart.attempt(), stalwart.idempotency_key()))
        if len(seen) < 3:
            raise TimeoutError("slow provider")
        return "answer"

    @app.workflow
    def agent() -> str:
        return str(
            stalwart.run_step(
                "ask", flaky, retry=stalwart.Retry(max_attempts=3, jitter=False), timeout=5
            )
        )

    assert app.run(agent, workflow_id="ask") == "answer"
    assert [a for a, _ in seen] == [1, 2, 3]
    assert len({key for _, key in seen}) == 1  # one key for every attempt
    assert clock.slept == [1.0, 2.0]


def test_output_validation_and_a_failure_reach_the_workflow_as_step_failed(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow
    def agent() -> str:
        try:
            stalwart.run_step(
                "parse", lambda: "not a number", output=int, retry=stalwart.Retry.never()
            )
        except stalwart.StepFailed as exc:
            return exc.cause_type
        return "accepted"

    assert app.run(agent, workflow_id="parse") == "OutputInvalid"


def test_a_compensation_undoes_a_run_step_when_the_run_fails(app: stalwart.Stalwart) -> None:
    undone: list[Any] = []

    def reserve(seat: str) -> str:
        return f"hold-{seat}"

    def release(hold: str, seat: str) -> None:
        undone.append((hold, seat))

    @app.workflow
    def agent() -> None:
        stalwart.run_step("reserve", reserve, args=("12A",), compensate=release)
        raise RuntimeError("payment declined")

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(agent, workflow_id="trip")
    assert undone == [("hold-12A", "12A")]


async def _fetch(url: str) -> str:
    return f"body of {url}"


def test_run_step_async_in_an_async_workflow(app: stalwart.Stalwart) -> None:
    @app.workflow
    async def agent() -> str:
        return str(await stalwart.run_step_async("fetch", _fetch, args=("https://a.test",)))

    assert app.run(agent, workflow_id="fetch") == "body of https://a.test"
    assert [e.name for e in app.journal("fetch") if e.kind == "step"] == ["fetch"]


def test_mistakes_are_refused_with_a_clear_error(app: stalwart.Stalwart) -> None:
    @app.step(name="charge")
    def charge() -> None:
        return None

    @app.workflow
    def clash() -> None:
        stalwart.run_step("charge", lambda: None)

    with pytest.raises(stalwart.WorkflowFailed, match="declared with @app.step"):
        app.run(clash, workflow_id="clash")

    @app.workflow
    def async_in_sync() -> None:
        stalwart.run_step("fetch", _fetch, args=("x",))

    with pytest.raises(stalwart.WorkflowFailed, match="run_step_async"):
        app.run(async_in_sync, workflow_id="async-in-sync")
    with pytest.raises(stalwart.UsageError, match="non-empty str"):
        stalwart.run_step("", lambda: None)
    with pytest.raises(TypeError, match="tuple of arguments"):
        stalwart.run_step("x", lambda a: a, args="abc")  # type: ignore[arg-type]


def test_one_name_has_one_compensation(app: stalwart.Stalwart) -> None:
    undone: list[str] = []

    def undo_hotel(booking: str) -> None:
        undone.append(booking)

    def undo_flight(booking: str) -> None:
        undone.append(f"flight undo of {booking}")

    @app.workflow
    def trip() -> None:
        stalwart.run_step("book", lambda: "hotel", compensate=undo_hotel)
        stalwart.run_step("book", lambda: "flight", compensate=undo_flight)

    with pytest.raises(stalwart.WorkflowFailed, match="a name of its own"):
        app.run(trip, workflow_id="trip-2")
    assert undone == ["hotel"]  # the first booking was undone by its own compensation
