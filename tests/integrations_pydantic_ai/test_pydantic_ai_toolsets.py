"""Streamed requests, dynamic and MCP toolsets, and approvals under ``StalwartDurability``: a
streamed request is one step whose events reach the event handler inside it, a dynamic
toolset's discovery and calls are steps, an MCP server's tools are steps (a real server on
stdio), and a tool that needs approval waits on ``request_approval_async``.

As in ``test_pydantic_ai_steps.py``, a ``BaseException`` raised inside a step stands in for
``kill -9``."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import AsyncIterable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, CallDeferred, DeferredToolRequests, RunContext
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.toolsets import DynamicToolset, FunctionToolset
from pydantic_ai_scripts import Script, call, returns, text

import stalwart
from stalwart.integrations.pydantic_ai import StalwartDurability

MCP_SERVER = Path(__file__).with_name("mcp_calc_server.py")


class Crash(BaseException):
    """Stands in for kill -9 in the middle of a step."""


def _names(app: stalwart.Stalwart, wid: str) -> list[str]:
    return [e.name for e in app.journal(wid) if e.kind == "step" and e.status == "completed"]


def _later(seconds: float, action: Callable[[], Any], app: stalwart.Stalwart) -> None:
    """Play the operator from another thread after ``seconds``, once the app shows a pending
    approval (a slow machine may take longer to get there)."""

    def run() -> None:
        time.sleep(seconds)
        deadline = time.monotonic() + 30
        while not app.approvals() and time.monotonic() < deadline:
            time.sleep(0.05)
        action()

    threading.Thread(target=run, daemon=True).start()


@pytest.fixture
def real_app(store_url: str) -> Iterator[stalwart.Stalwart]:
    """Waits need time to pass: an app with the real clock."""
    with stalwart.Stalwart(store_url) as instance:
        yield instance


# -- streaming --------------------------------------------------------------------------------


def test_a_streamed_request_is_one_step_and_its_events_reach_the_handler_inside_it(
    app: stalwart.Stalwart,
) -> None:
    seen: list[tuple[str, str | None]] = []

    async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            try:
                key: str | None = stalwart.idempotency_key()  # only inside a step
            except RuntimeError:
                key = None
            seen.append((event.event_kind, key))

    crashing = {"on": True}
    script = Script([call("add", a=1, b=2), lambda messages: text(f"sum {returns(messages)[-1]}")])
    agent = Agent(
        script.model(),
        name="streamer",
        capabilities=[StalwartDurability(event_stream_handler=handler)],
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        if crashing["on"]:
            raise Crash()
        return a + b

    @app.workflow
    async def run() -> str:
        return (await agent.run("add")).output

    with pytest.raises(Crash):
        app.run(run, workflow_id="stream")
    first_stream = list(seen)
    crashing["on"] = False
    assert app.run(run, workflow_id="stream") == "sum 3 "

    journal = [e for e in app.journal("stream") if e.kind == "step" and e.status == "completed"]
    streams = [e for e in journal if e.name == "streamer__model.request_stream"]
    handled = [e for e in journal if e.name == "streamer__event_stream_handler"]
    assert len(streams) == 2
    assert [e.input["kwargs"] for e in handled] == [
        {"event": "function_tool_call"},
        {"event": "function_tool_result"},
    ]
    keys = {e.idempotency_key: e.name for e in journal}
    # every event was handled inside a step: the stream's inside its request, a tool's in its own
    assert all(key in keys for _, key in seen), seen
    by_step = [(kind, keys[key]) for kind, key in seen if key is not None]
    assert ("part_start", "streamer__model.request_stream") in by_step
    assert ("function_tool_result", "streamer__event_stream_handler") in by_step
    # the first stream's events were delivered once: the resumed run replayed that request
    first_key = streams[0].idempotency_key
    assert [e for e in seen if e[1] == first_key] == [e for e in first_stream if e[1] == first_key]


def test_a_handler_given_to_run_sees_recorded_events_again_on_replay(
    app: stalwart.Stalwart,
) -> None:
    """``agent.run(event_stream_handler=...)`` streams each request inside its step, but the
    handler runs in workflow code, after the step is recorded: a resumed run replays the
    recorded events to it."""
    seen: list[str] = []

    async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event.event_kind)

    crashing = {"on": True}
    agent = Agent(
        Script([call("add", a=1, b=2), text("done")]).model(),
        name="streamer",
        capabilities=[StalwartDurability()],
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        if crashing["on"]:
            raise Crash()
        return a + b

    @app.workflow
    async def run() -> str:
        return (await agent.run("add", event_stream_handler=handler)).output

    with pytest.raises(Crash):
        app.run(run, workflow_id="replayed-events")
    before, crashing["on"] = list(seen), False
    seen.clear()
    assert app.run(run, workflow_id="replayed-events") == "done "
    assert seen[: len(before)] == before == ["part_start", "part_end", "function_tool_call"]
    assert "streamer__model.request_stream" in _names(app, "replayed-events")


def test_run_stream_inside_a_workflow_journals_its_requests(app: stalwart.Stalwart) -> None:
    agent = Agent(
        Script([text("streamed answer")]).model(),
        name="streamer",
        capabilities=[StalwartDurability()],
    )

    @app.workflow
    async def run() -> str:
        async with agent.run_stream("hi") as result:
            return await result.get_output()

    assert app.run(run, workflow_id="run-stream") == "streamed answer "
    assert _names(app, "run-stream") == ["streamer__model.request_stream"]


def test_iter_inside_a_workflow_journals_its_requests(app: stalwart.Stalwart) -> None:
    agent = Agent(
        Script([call("add", a=1, b=2), text("iterated")]).model(),
        name="iterator",
        capabilities=[StalwartDurability()],
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    @app.workflow
    async def run() -> str:
        async with agent.iter("add") as agent_run:
            async for _node in agent_run:
                pass
        assert agent_run.result is not None
        return agent_run.result.output

    assert app.run(run, workflow_id="iter") == "iterated"
    assert _names(app, "iter") == [
        "iterator__model.request",
        "iterator__function_toolset__<agent>.call_tool:add",
        "iterator__model.request",
    ]


# -- toolsets ---------------------------------------------------------------------------------


def test_a_dynamic_toolsets_discovery_and_calls_are_steps(app: stalwart.Stalwart) -> None:
    built: list[int] = []
    shouted: list[str] = []
    crashing = {"on": True}
    inner = FunctionToolset[None](id="inner")

    @inner.tool_plain
    def shout(word: str) -> str:
        shouted.append(word)
        if crashing["on"] and word == "two":
            raise Crash()
        return word.upper()

    def tools_for(ctx: RunContext[None]) -> FunctionToolset[None]:
        built.append(ctx.run_step)
        return inner

    script = Script([call("shout", word="one"), call("shout", word="two"), text("shouted")])
    agent = Agent(
        script.model(),
        name="dyn",
        toolsets=[DynamicToolset(tools_for, id="words")],
        capabilities=[StalwartDurability()],
    )

    @app.workflow
    async def run() -> str:
        return (await agent.run("shout")).output

    with pytest.raises(Crash):
        app.run(run, workflow_id="dynamic")
    built_before, crashing["on"] = len(built), False
    assert app.run(run, workflow_id="dynamic") == "shouted"
    assert shouted == ["one", "two", "two"]  # only the interrupted call again
    # each step builds the toolset it uses; replayed steps build nothing: after the crash only
    # the interrupted call (run step 2) and the last discovery (run step 3) did
    assert built[built_before:] == [2, 3]
    discovery = "dyn__dynamic_toolset__words.get_tools"
    shout_step = "dyn__dynamic_toolset__words.call_tool:shout"
    assert _names(app, "dynamic") == [
        discovery,
        "dyn__model.request",
        shout_step,
        discovery,
        "dyn__model.request",
        shout_step,
        discovery,
        "dyn__model.request",
    ]


def test_an_mcp_servers_tools_are_steps(app: stalwart.Stalwart, tmp_path: Path) -> None:
    """A real MCP server in a subprocess on stdio: its tool list and each call are steps, and a
    resumed run calls the server only for what was not recorded."""
    pytest.importorskip("fastmcp", reason="MCPToolset needs pydantic-ai-slim[mcp]")
    from fastmcp.client.transports import PythonStdioTransport
    from pydantic_ai.mcp import MCPToolset

    calls = tmp_path / "mcp-calls.log"
    server = PythonStdioTransport(
        str(MCP_SERVER), args=[str(calls)], python_cmd=sys.executable, keep_alive=False
    )
    crashing = {"on": True}

    def before(n: int) -> None:
        if n == 2 and crashing["on"]:
            raise Crash()

    script = Script([call("add", a=2, b=3), lambda messages: text(returns(messages)[-1])], before)
    agent = Agent(
        script.model(),
        name="calc",
        toolsets=[MCPToolset(server, id="calc")],
        capabilities=[StalwartDurability()],
    )

    @app.workflow
    async def run() -> str:
        return (await agent.run("2 + 3")).output

    with pytest.raises(Crash):
        app.run(run, workflow_id="mcp")
    crashing["on"] = False
    assert app.run(run, workflow_id="mcp") == "5"
    assert calls.read_text().splitlines() == ["add 2 3"]  # once, though the run ran twice
    assert _names(app, "mcp") == [
        "calc__mcp_server__calc.get_tools",
        "calc__model.request",
        "calc__mcp_server__calc.call_tool:add",
        "calc__model.request",
    ]


# -- approvals --------------------------------------------------------------------------------


def _refunds(refunded: list[str], **capability: Any) -> Agent[None, str]:
    script = Script([call("refund", order="o-9"), lambda messages: text(returns(messages)[-1])])
    agent = Agent(script.model(), name="refunds", capabilities=[StalwartDurability(**capability)])

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        refunded.append(order)
        return f"refunded {order}"

    return agent


def test_a_rejected_tool_call_is_denied_and_the_model_is_told_why(
    real_app: stalwart.Stalwart,
) -> None:
    refunded: list[str] = []
    agent = _refunds(refunded)

    @real_app.workflow
    async def run() -> str:
        return (await agent.run("refund o-9")).output

    def reject() -> None:
        (pending,) = real_app.approvals()
        assert pending.details["args"] == {"order": "o-9"}
        real_app.reject("denied", by="ops", reason="already refunded")

    _later(0.3, reject, real_app)
    answer = real_app.run(run, workflow_id="denied")
    assert answer == "The call of 'refund' was denied by ops: already refunded"
    assert refunded == []


def test_an_approval_that_times_out_denies_the_call(real_app: stalwart.Stalwart) -> None:
    refunded: list[str] = []
    agent = _refunds(refunded, approval_timeout=0.1)

    @real_app.workflow
    async def run() -> str:
        return (await agent.run("refund o-9")).output

    answer = real_app.run(run, workflow_id="unanswered")
    assert answer == "No one approved the call of 'refund' in time."
    assert refunded == [] and real_app.approvals() == []


def test_calls_to_be_executed_elsewhere_are_left_to_the_caller(app: stalwart.Stalwart) -> None:
    """A tool that raises ``CallDeferred`` ends the run with ``DeferredToolRequests``, as it
    does without stalwart (its result comes back through a later run)."""
    script = Script([call("external_lookup", q="x"), text("unreachable")])
    agent = Agent(
        script.model(),
        name="deferring",
        capabilities=[StalwartDurability()],
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain
    def external_lookup(q: str) -> str:
        raise CallDeferred()

    @app.workflow
    async def run() -> list[str]:
        output = (await agent.run("look up x")).output
        assert isinstance(output, DeferredToolRequests)
        return [c.tool_name for c in output.calls]

    assert app.run(run, workflow_id="deferred") == ["external_lookup"]
