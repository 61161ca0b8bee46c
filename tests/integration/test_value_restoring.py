"""Models and dataclasses are restored wherever the annotation names them, never silently left
as dicts; positions the annotation does not name stay as they round-trip.

A value that does not validate as the class its annotation names is a ``SerializationError``
naming the step (or workflow) and the type: on a first run a journaled non-retryable step
failure, on replay (the class changed) raised where the step is called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

import stalwart

pytestmark = pytest.mark.timeout(60)


@dataclasses.dataclass
class Point:
    x: int


class Plan(pydantic.BaseModel):
    steps: list[str]


class PlanV2(pydantic.BaseModel):
    steps: list[str]
    owner: str  # a required field the recorded plans lack


def test_classes_named_inside_containers_are_restored(app: stalwart.Stalwart) -> None:
    seen: list[Any] = []

    @app.step
    def points() -> list[Point]:
        return [Point(1), Point(2)]

    @app.step
    def plans() -> dict[str, Plan]:
        return {"a": Plan(steps=["x"])}

    @app.step
    def pair() -> tuple[Point, str]:
        return (Point(3), "s")

    @app.step
    def maybe() -> Point | None:
        return Point(4)

    @app.workflow
    def wf() -> None:
        seen.extend([points(), plans(), pair(), maybe()])

    app.run(wf, workflow_id="r")
    assert seen == [[Point(1), Point(2)], {"a": Plan(steps=["x"])}, (Point(3), "s"), Point(4)]


def test_positions_no_class_names_stay_as_they_round_trip(app: stalwart.Stalwart) -> None:
    seen: list[Any] = []

    @app.step
    def as_int() -> int:
        return "5"  # type: ignore[return-value]

    @app.step
    def as_dict() -> dict:  # type: ignore[type-arg]
        return {"x": 1}

    @app.step
    def as_any() -> Any:
        return Point(1)

    @app.workflow
    def wf() -> None:
        seen.extend([as_int(), as_dict(), as_any()])

    app.run(wf, workflow_id="p")
    assert seen == ["5", {"x": 1}, {"x": 1}]


def _counting_agent(app: stalwart.Stalwart, calls: list[int], step: Callable[[], Any]) -> Any:
    tool = app.step(name="tool", retry=stalwart.Retry(max_attempts=5, initial_delay=0.0))(step)

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            tool()
        except stalwart.StepFailed as exc:
            return f"{exc.cause_type}|{exc.attempts}|{exc.cause_message}"
        return "restored"

    return agent


def test_a_result_that_does_not_fit_its_annotation_fails_the_step_once(
    app: stalwart.Stalwart,
) -> None:
    calls: list[int] = []

    def tool() -> Point:
        calls.append(1)
        return {"x": "not a number"}  # type: ignore[return-value]

    agent = _counting_agent(app, calls, tool)
    cause, attempts, message = app.run(agent, workflow_id="f").split("|")
    assert (cause, attempts, calls) == ("SerializationError", "1", [1])
    assert "step 'tool'" in message and "Point" in message
    steps = [e for e in app.journal("f") if e.kind == "step"]
    assert [(e.status, e.attempt) for e in steps] == [("failed", 1)]


def test_a_model_output_accepts_a_json_string(app: stalwart.Stalwart) -> None:
    got: list[Any] = []

    @app.step(output=Plan, retry=stalwart.Retry.never())
    def llm() -> str:
        return '{"steps": ["search", "answer"]}'

    @app.workflow
    def wf() -> None:
        got.append(llm())

    app.run(wf, workflow_id="j")
    assert got == [Plan(steps=["search", "answer"])]


def test_a_recorded_value_that_no_longer_fits_raises_on_replay(shared_url: str) -> None:
    calls: list[int] = []
    with stalwart.Stalwart(shared_url) as old:

        @old.step(name="plan")
        def plan_v1() -> Plan:
            calls.append(1)
            return Plan(steps=["a"])

        @old.step(name="halt")
        def halt_v1() -> None:
            raise KeyboardInterrupt

        @old.workflow(name="agent")
        def agent_v1() -> None:
            plan_v1()
            halt_v1()

        with pytest.raises(KeyboardInterrupt):
            old.run(agent_v1, workflow_id="v")
    with stalwart.Stalwart(shared_url) as new:

        @new.step(name="plan")
        def plan_v2() -> PlanV2:
            calls.append(2)
            return PlanV2(steps=["a"], owner="me")

        @new.step(name="halt")
        def halt_v2() -> None:
            pass

        @new.workflow(name="agent")
        def agent_v2() -> str:
            try:
                plan_v2()
            except stalwart.SerializationError as exc:
                return str(exc)
            return "silently a dict"

        message = new.run(agent_v2, workflow_id="v")
    assert "step 'plan'" in message and "PlanV2" in message
    assert calls == [1]


def test_a_workflow_result_that_does_not_fit_its_annotation_fails_the_run(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow(name="agent")
    def agent() -> Point:
        return {"x": "nope"}  # type: ignore[return-value]

    with pytest.raises(stalwart.WorkflowFailed, match="SerializationError") as info:
        app.run(agent, workflow_id="w")
    assert "workflow 'agent'" in info.value.cause_message
    assert "Point" in info.value.cause_message
