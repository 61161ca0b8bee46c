"""Bad input is refused with an error that names what and where; nothing recorded is harmed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stalwart


def test_unserializable_workflow_arguments_record_nothing(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent(x: Any) -> None:
        return None

    with pytest.raises(stalwart.SerializationError, match=r"workflow 'agent'.*object"):
        app.run(agent, object())
    with pytest.raises(stalwart.SerializationError, match="dict key int"):
        app.start(agent, {1: "a"})
    assert app.list_workflows() == []


def test_unserializable_step_arguments_name_workflow_step_and_type(app: stalwart.Stalwart) -> None:
    calls = []

    @app.step(name="tool")
    def tool(x: Any) -> None:
        calls.append(x)

    @app.workflow(name="agent")
    def agent() -> None:
        tool({"client": object()})

    with pytest.raises(stalwart.WorkflowFailed) as info:
        app.run(agent, workflow_id="u1")
    assert info.value.cause_type == "SerializationError"
    for fragment in ("workflow 'agent'", "step 'tool'", "object", "arguments[0]['client']"):
        assert fragment in info.value.cause_message
    assert calls == []
    assert [e for e in app.journal("u1") if e.kind == "step"] == []


def test_unserializable_step_results_fail_without_retrying(app: stalwart.Stalwart) -> None:
    calls = []

    @app.step(name="tool", retry=stalwart.Retry(max_attempts=5))
    def tool() -> Any:
        calls.append(1)
        return {"socket": object()}

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            tool()
        except stalwart.StepFailed as exc:
            return f"{exc.cause_type}|{exc.attempts}|{exc.cause_message}"
        return "no"

    cause, attempts, message = app.run(agent).split("|")
    assert (cause, attempts, len(calls)) == ("SerializationError", "1", 1)
    assert "step 'tool'" in message and "object" in message and "workflow 'agent'" in message


def test_unserializable_workflow_result(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent() -> Any:
        return object()

    with pytest.raises(stalwart.WorkflowFailed, match="SerializationError"):
        app.run(agent)


def test_names_registered_twice(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def one() -> None: ...

    with pytest.raises(stalwart.RegistrationError, match="'agent'"):

        @app.workflow(name="agent")
        def two() -> None: ...

    @app.step
    def tool() -> None: ...

    with pytest.raises(stalwart.RegistrationError, match="tool"):
        app.step(name=tool.__qualname__)(lambda: None)


def test_wrong_step_arguments_raise_type_error_before_journaling(app: stalwart.Stalwart) -> None:
    calls = []

    @app.step(name="tool")
    def tool(a: int, *, b: int) -> None:
        calls.append(a)

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            tool(1, 2)  # type: ignore[misc]
        except TypeError as exc:
            return str(exc)
        return "no"

    assert "positional" in app.run(agent, workflow_id="t1")
    assert calls == []
    assert [e for e in app.journal("t1") if e.kind == "step"] == []
    with pytest.raises(TypeError):
        app.run(agent, "unexpected")


def test_async_step_in_a_sync_workflow(app: stalwart.Stalwart) -> None:
    @app.step(name="fetch")
    async def fetch() -> int:
        return 1

    @app.workflow(name="agent")
    def agent() -> Any:
        return fetch()

    with pytest.raises(stalwart.WorkflowFailed, match="async step 'fetch'.*sync workflow"):
        app.run(agent)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda app: app.queue(""), ValueError, "non-empty string"),
        (lambda app: app.queue("llm", concurrency=0), ValueError, "concurrency=0"),
        (lambda app: app.queue("llm", rate=2.5), TypeError, "rate=2.5"),
        (lambda app: app.queue("llm", rate=5, period=0), ValueError, "period=0"),
        (lambda app: app.workflow(queue=""), ValueError, "queue=''"),
        (lambda app: app.start("agent", queue=7), ValueError, "queue=7"),
        (lambda app: app.start("agent", priority="high"), TypeError, "priority='high'"),
    ],
)
def test_bad_queue_settings_are_refused_with_what_to_do(
    app: stalwart.Stalwart, call: Any, error: type[Exception], match: str
) -> None:
    @app.workflow(name="agent")
    def agent() -> int:
        return 1

    with pytest.raises(error, match=match):
        call(app)
    assert app.list_workflows() == []


def test_bad_settings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ValueError, match="durability"):
        stalwart.Stalwart(url, durability="fast")
    with pytest.raises(ValueError, match="serializer"):
        stalwart.Stalwart(url, serializer="yaml")
    with pytest.raises(ValueError, match="lease_seconds"):
        stalwart.Stalwart(url, lease_seconds=0)
    with pytest.raises(ValueError, match="max_recoveries"):
        stalwart.Stalwart(url, max_recoveries=0)
    with pytest.raises(TypeError, match="Retry"):
        stalwart.Stalwart("memory://").step(retry=3)  # type: ignore[call-overload]


def test_corrupt_output_names_run_and_seq_and_harms_nothing_else(
    app: stalwart.Stalwart, raw_sql: Callable[..., list[Any]]
) -> None:
    calls = []
    stop = {"on": True}

    @app.step(name="tool")
    def tool(n: int) -> int:
        calls.append(n)
        return n

    @app.step(name="halt")
    def halt() -> None:
        if stop["on"]:
            raise KeyboardInterrupt

    @app.workflow(name="agent")
    def agent() -> int:
        total = tool(1) + tool(2)
        halt()
        return total

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="bad")
    stop["on"] = False
    assert app.run(agent, workflow_id="good") == 3
    raw_sql(
        app,
        "UPDATE journal SET output = :bad WHERE workflow_id = 'bad' AND seq = 2",
        {"bad": bytes.fromhex("DEADBEEF00")},
    )
    with pytest.raises(stalwart.CorruptRecord, match=r"run 'bad', seq 2") as info:
        app.run(agent, workflow_id="bad")
    assert (info.value.workflow_id, info.value.seq) == ("bad", 2)
    assert calls == [1, 2, 1, 2]  # the corrupt step was not silently re-executed
    with pytest.raises(stalwart.CorruptRecord, match="seq 2"):
        app.journal("bad")
    assert app.run(agent, workflow_id="good") == 3
    assert len(app.journal("good")) > 0
    # It waits for an operator (a retry would only fail again), and says why each time.
    assert app.handle("bad").status() == "needs_attention"
    with pytest.raises(stalwart.CorruptRecord, match=r"run 'bad', seq 2"):
        app.run(agent, workflow_id="bad")
    assert calls == [1, 2, 1, 2]
