"""Values the JSON codec cannot write are a ``SerializationError``, never a raw exception.

A lone surrogate (an LLM reply cut inside an emoji), an int past the interpreter's digit limit
and a list that contains itself: as a step's result, a non-retryable failure that is journaled,
so replay does not run the step again; as arguments or an event payload, refused before anything
is recorded.
"""

from __future__ import annotations

from typing import Any

import pytest

import stalwart

pytestmark = pytest.mark.timeout(60)


def _looped() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


UNENCODABLE = {
    "lone surrogate": lambda: {"reply": "cut inside an emoji \ud83d"},
    "huge int": lambda: [10**5000],
    "self-referencing list": _looped,
}
IDS = list(UNENCODABLE)


@pytest.mark.parametrize("kind", IDS)
def test_a_step_result_the_codec_cannot_write_fails_the_step_once(
    app: stalwart.Stalwart, kind: str
) -> None:
    calls: list[int] = []
    stop = {"on": True}

    @app.step(name="llm", retry=stalwart.Retry(max_attempts=5, initial_delay=0.0))
    def llm() -> Any:
        calls.append(1)
        return UNENCODABLE[kind]()

    @app.step(name="halt")
    def halt() -> None:
        if stop["on"]:
            raise KeyboardInterrupt

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            llm()
        except stalwart.StepFailed as exc:
            halt()
            raise RuntimeError(f"{exc.cause_type}: {exc.cause_message}") from exc
        return "no"

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="w")
    stop["on"] = False
    with pytest.raises(stalwart.WorkflowFailed, match="SerializationError") as info:
        app.run(agent, workflow_id="w")  # replay: the failure is read back, llm does not run
    assert "step 'llm'" in info.value.cause_message
    assert calls == [1]
    steps = [e for e in app.journal("w") if e.kind == "step" and e.name == "llm"]
    assert [(e.status, e.attempt) for e in steps] == [("failed", 1)]
    assert "SerializationError" in (steps[0].error or "")


@pytest.mark.parametrize("kind", IDS)
def test_arguments_and_event_payloads_the_codec_cannot_write_record_nothing(
    app: stalwart.Stalwart, kind: str
) -> None:
    @app.workflow(name="agent")
    def agent(x: Any = None) -> Any:
        return stalwart.wait_for_event("go") if x is None else x

    with pytest.raises(stalwart.SerializationError, match="workflow 'agent'"):
        app.start(agent, UNENCODABLE[kind]())
    with pytest.raises(stalwart.SerializationError, match="workflow 'agent'"):
        app.run(agent, UNENCODABLE[kind]())
    assert app.list_workflows() == []
    app.start(agent, workflow_id="e")
    before = app.journal("e")
    with pytest.raises(stalwart.SerializationError, match="event 'go'"):
        app.send_event("e", "go", UNENCODABLE[kind]())
    assert app.journal("e") == before


def test_a_workflow_result_the_codec_cannot_write_fails_the_run(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent() -> str:
        return "\ud83d"

    with pytest.raises(stalwart.WorkflowFailed, match="SerializationError"):
        app.run(agent)
