"""What ``StalwartDurability`` journals, in one process on every backend: each model request and
tool call is a step that a resumed run does not repeat, tool metadata sets a tool's step
options, model steps retry as ``Retry.llm()`` says, and outside a workflow nothing changes.

A ``BaseException`` raised inside a step stands in for ``kill -9`` here (stalwart records
nothing for it, so the run stays ``running``); the real SIGKILLs are in
``test_pydantic_ai_crashes.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai_scripts import Script, call, returns, text

import stalwart
from stalwart.integrations.pydantic_ai import StalwartDurability
from stalwart.testing import FakeClock

TOOL = "helper__function_toolset__<agent>.call_tool:"
MODEL = "helper__model.request"


class Crash(BaseException):
    """Stands in for kill -9 in the middle of a step."""


def _steps(app: stalwart.Stalwart, wid: str) -> list[tuple[str, str]]:
    return [(e.name, e.status) for e in app.journal(wid) if e.kind == "step"]


def _journal(app: stalwart.Stalwart, wid: str) -> str:
    """The run's journal, an entry a line, for an assertion's message. A step's idempotency key
    ends with its journal position (``wid/t7.0``: the first call of the main task's 8th child
    task), so a resumed run that matched its calls to the wrong records shows which attempt's
    positions moved."""
    lines = []
    for e in app.journal(wid):
        where = f" at {e.idempotency_key.removeprefix(wid + '/')}" if e.idempotency_key else ""
        lines.append(
            f"  seq {e.seq} {e.kind} {e.name}{where}: {e.status} (attempt {e.attempt}) "
            f"-> {_brief(e.output)}"
        )
    return "\n".join(lines)


def _brief(output: Any) -> str:
    """A recorded output, short: a model response as its tool calls and text."""
    parts = output.get("parts") if isinstance(output, dict) else None
    if not isinstance(parts, list):
        return str(output)[:80]
    return ", ".join(
        f"call {p.get('tool_name')}({p.get('args')})"
        if p.get("part_kind") == "tool-call"
        else repr(p.get("content"))
        for p in parts
        if isinstance(p, dict)
    )


def _agent(script: Script, **capability: Any) -> Agent[None, str]:
    return Agent(script.model(), name="helper", capabilities=[StalwartDurability(**capability)])


def _workflow(app: stalwart.Stalwart, agent: Agent[None, str], name: str = "helper_run") -> Any:
    @app.workflow(name=name)
    async def run(prompt: str) -> str:
        result = await agent.run(prompt)
        return result.output

    return run


@pytest.mark.parametrize("crash_in", ["model", "tool"])
def test_a_resumed_agent_repeats_no_completed_model_call_or_tool(
    app: stalwart.Stalwart, crash_in: str
) -> None:
    executed: list[str] = []
    crashing = {"on": True}

    def before(n: int) -> None:
        executed.append(f"model-{n}")
        if crash_in == "model" and n == 3 and crashing["on"]:
            raise Crash()

    script = Script([call("add", a=1, b=2), call("add", a=3, b=4), text("sums")], before)
    agent = _agent(script)

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        executed.append(f"add {a} {b}")
        if crash_in == "tool" and a == 3 and crashing["on"]:
            raise Crash()
        return a + b

    run = _workflow(app, agent)
    with pytest.raises(Crash):
        app.run(run, "add things", workflow_id="sums")
    assert app.handle("sums").status() == "running"

    first = list(executed)
    crashing["on"] = False
    executed.clear()
    assert app.run(run, "add things", workflow_id="sums") == "sums"
    # One full run of the suite saw the resumed agent run its first model call and tool again
    # (['model-1', 'add 1 2', 'add 3 4', 'model-4']), as if one attempt's calls sat two journal
    # positions away from the other's; the journal says which, should it happen again.
    seen = f"first attempt ran {first}, the resumed one {executed}; journal:\n" + _journal(
        app, "sums"
    )
    # the interrupted call runs again, and only the calls after it run for the first time
    assert executed == (["model-3"] if crash_in == "model" else ["add 3 4", "model-3"]), seen
    assert _steps(app, "sums") == [
        (MODEL, "completed"),
        (TOOL + "add", "completed"),
        (MODEL, "completed"),
        *([(TOOL + "add", "failed")] if crash_in == "tool" else []),
        (TOOL + "add", "completed"),
        *([(MODEL, "failed")] if crash_in == "model" else []),
        (MODEL, "completed"),
    ], seen


def test_a_tool_call_is_journaled_with_its_arguments_and_result(app: stalwart.Stalwart) -> None:
    agent = _agent(Script([call("greet", name="Ada"), text("done")]))

    @agent.tool_plain
    def greet(name: str) -> dict[str, str]:
        return {"greeting": f"hello {name}", "key": stalwart.idempotency_key()}

    app.run(_workflow(app, agent), "greet Ada", workflow_id="greet")
    (entry,) = [e for e in app.journal("greet") if e.name == TOOL + "greet"]
    assert entry.input == {"args": [], "kwargs": {"name": "Ada"}}
    assert entry.output["kind"] == "tool_return"
    assert entry.output["result"] == {"greeting": "hello Ada", "key": entry.idempotency_key}
    model = next(e for e in app.journal("greet") if e.name == MODEL)
    assert model.usage is not None and model.usage.input_tokens > 0  # from the ModelResponse


def test_tool_metadata_sets_the_retry_of_its_step(app: stalwart.Stalwart) -> None:
    failures = {"left": 2}
    agent = _agent(Script([call("flaky"), lambda messages: text(returns(messages)[-1])]))

    @agent.tool_plain(metadata={"stalwart": {"retry": stalwart.Retry(max_attempts=3)}})
    def flaky() -> str:
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("the service hung up")
        return "third time lucky"

    assert app.run(_workflow(app, agent), "try", workflow_id="flaky") == "third time lucky"
    assert [s for n, s in _steps(app, "flaky") if n == TOOL + "flaky"] == [
        "failed",
        "failed",
        "completed",
    ]


def test_tool_metadata_sets_the_timeout_of_its_step(app: stalwart.Stalwart) -> None:
    agent = _agent(Script([call("slow"), text("unreachable")]))

    @agent.tool_plain(metadata={"stalwart": {"timeout": 0.05, "retry": stalwart.Retry.never()}})
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    with pytest.raises(stalwart.WorkflowFailed, match="StepTimeout"):
        app.run(_workflow(app, agent), "wait", workflow_id="slow")


def test_a_tool_with_stalwart_false_runs_in_workflow_code(app: stalwart.Stalwart) -> None:
    ran: list[str] = []
    agent = _agent(Script([call("pure", x=2), lambda messages: text(returns(messages)[-1])]))

    @agent.tool_plain(metadata={"stalwart": False})
    def pure(x: int) -> int:
        ran.append("pure")
        return x * x

    assert app.run(_workflow(app, agent), "square", workflow_id="pure") == "4"
    assert ran == ["pure"]
    assert [n for n, _ in _steps(app, "pure")] == [MODEL, MODEL]  # no step for the tool


def test_unknown_tool_options_are_refused(app: stalwart.Stalwart) -> None:
    agent = _agent(Script([call("odd"), text("no")]))

    @agent.tool_plain(metadata={"stalwart": {"retries": 3}})
    def odd() -> str:
        return "never"

    with pytest.raises(stalwart.WorkflowFailed, match="unknown 'stalwart' metadata"):
        app.run(_workflow(app, agent), "go", workflow_id="odd")


def test_model_steps_retry_as_retry_llm_says(app: stalwart.Stalwart, clock: FakeClock) -> None:
    """A 429 waits what its Retry-After says (3 s on the fake clock), a 503 is retried, and
    the request then succeeds; nothing else of the run is repeated."""
    faults = [
        ModelHTTPError(429, "fake-model", headers={"retry-after": "3"}),
        ModelHTTPError(503, "fake-model"),
    ]

    def before(n: int) -> None:
        if faults:
            raise faults.pop(0)

    agent = _agent(Script([text("fine")], before))
    assert app.run(_workflow(app, agent), "hi", workflow_id="retried") == "fine"
    assert _steps(app, "retried") == [(MODEL, "failed"), (MODEL, "failed"), (MODEL, "completed")]
    assert 3.0 in clock.slept
    errors = [e.error for e in app.journal("retried") if e.status == "failed"]
    assert errors[0] is not None and errors[0].endswith("[Retry-After: 3 s]")


@pytest.mark.parametrize(
    "fault",
    [ModelHTTPError(400, "fake-model", body={"error": "bad request"}), UserError("no such model")],
    ids=["400", "UserError"],
)
def test_a_model_error_no_attempt_can_fix_fails_at_once(
    app: stalwart.Stalwart, fault: Exception
) -> None:
    def before(n: int) -> None:
        raise fault

    agent = _agent(Script([text("never")], before))
    with pytest.raises(stalwart.WorkflowFailed, match=r"after 1 attempt\(s\)"):
        app.run(_workflow(app, agent), "hi", workflow_id="bad")


def test_outside_a_workflow_the_agent_is_an_ordinary_agent(app: stalwart.Stalwart) -> None:
    agent = _agent(Script([call("add", a=1, b=1), text("two")]))

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    assert agent.run_sync("1 + 1").output == "two"
    assert app.list_workflows() == []


def test_inside_a_step_the_agent_is_an_ordinary_agent(app: stalwart.Stalwart) -> None:
    """An agent called by a step of another workflow: its calls are part of that step."""
    inner = _agent(Script([text("inner answer")]))

    @app.step(name="ask_inner")
    async def ask_inner() -> str:
        return (await inner.run("inner")).output

    @app.workflow
    async def outer() -> str:
        return await ask_inner()

    assert app.run(outer, workflow_id="outer") == "inner answer"
    assert [n for n, _ in _steps(app, "outer")] == ["ask_inner"]


def test_toolsets_added_at_run_time_are_refused_in_a_workflow(app: stalwart.Stalwart) -> None:
    agent = _agent(Script([text("no")]))
    extra = FunctionToolset[None](id="extra")

    @extra.tool_plain
    def unjournaled() -> str:
        return "would run unjournaled"

    @app.workflow
    async def run() -> str:
        return (await agent.run("go", toolsets=[extra])).output

    with pytest.raises(stalwart.WorkflowFailed, match="cannot be added at runtime with stalwart"):
        app.run(run, workflow_id="extra")


def test_a_sync_workflow_is_told_to_be_async(app: stalwart.Stalwart) -> None:
    agent = _agent(Script([text("no")]))

    @app.workflow
    def run() -> str:
        return agent.run_sync("go").output

    with pytest.raises(stalwart.WorkflowFailed, match="make the workflow 'async def'"):
        app.run(run, workflow_id="sync")


def test_an_in_doubt_irreversible_tool_waits_for_an_operator(app: stalwart.Stalwart) -> None:
    """Without ``verify``, a crash after the effect leaves the call in doubt: the run goes to
    ``needs_attention`` and an operator records what happened as the tool's plain return
    value, which the agent then receives."""
    sent: list[str] = []
    crashing = {"on": True}
    agent = _agent(Script([call("send", to="ada"), lambda messages: text(returns(messages)[-1])]))

    @agent.tool_plain(metadata={"stalwart": {"irreversible": True}})
    def send(to: str) -> str:
        sent.append(to)
        if crashing["on"]:
            raise Crash()  # the mail left, its result was never recorded
        return "msg-auto"

    run = _workflow(app, agent)
    with pytest.raises(Crash):
        app.run(run, "mail ada", workflow_id="mail")
    crashing["on"] = False
    with pytest.raises(stalwart.NeedsAttention, match="may have taken effect"):
        app.run(run, "mail ada", workflow_id="mail")
    (doubt,) = [e for e in app.journal("mail") if e.status == "in_doubt"]
    assert doubt.name == TOOL + "send" and doubt.seq is not None
    app.resolve("mail", doubt.seq, result="msg-1", by="ops")

    assert app.run(run, "mail ada", workflow_id="mail") == "msg-1"
    assert sent == ["ada"]  # never sent twice
