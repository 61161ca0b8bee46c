"""``DurableRunner`` in one process, on every backend: the journal it writes (its step names
are compatibility data, pinned here), parallel tools, handoffs, approvals, model retries and
settings. Each workflow is replayed at least once (after an approval or a durable sleep), and
the side file shows that a replay repeats no model call or tool."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ModelSettings, RunConfig, function_tool, handoff
from agents.mcp import MCPServer
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from oa_scripted import CountingModel, Recorder, call, trip_agent

import stalwart
from stalwart.integrations.openai_agents import DurableRunner, model_step_name, tool_step_name
from stalwart.testing import FakeClock

WAIT_S = 30.0


def decide_when_asked(
    app: stalwart.Stalwart, *, approve: bool = True, reason: str | None = None, times: int = 1
) -> threading.Thread:
    """Play the operator from another thread: answer each approval as it is asked."""

    def run() -> None:
        deadline = time.monotonic() + WAIT_S
        answered = 0
        while answered < times and time.monotonic() < deadline:
            pending = app.approvals()
            if not pending:
                time.sleep(0.01)
                continue
            wid = pending[0].workflow_id
            if approve:
                app.approve(wid, by="maria", reason=reason)
            else:
                app.reject(wid, by="maria", reason=reason)
            answered += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wake_when_waiting(app: stalwart.Stalwart, wid: str) -> threading.Thread:
    """Send the event ``go`` once run ``wid`` waits for it (its replay follows)."""

    def run() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                if app.handle(wid).status() == "suspended":
                    app.send_event(wid, "go")
                    return
            except stalwart.WorkflowNotFound:
                pass
            time.sleep(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def replay_from_the_top() -> None:
    """Suspend the workflow until ``wake_when_waiting`` wakes it: it then replays."""
    await stalwart.wait_for_event_async("go")


def journal_names(app: stalwart.Stalwart, wid: str) -> list[tuple[str, str]]:
    """``(kind, name)`` of every completed replay position, in journal order."""
    return [
        (e.kind, e.name)
        for e in sorted(app.journal(wid), key=lambda e: e.seq or 0)
        if e.seq is not None and e.status == "completed"
    ]


def test_the_journal_of_a_trip_and_its_pinned_step_names(
    app: stalwart.Stalwart, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)

    @app.workflow
    async def trip(question: str) -> str:
        agent = trip_agent(CountingModel(recorder), recorder)
        return str((await DurableRunner.run(agent, question)).final_output)

    decide_when_asked(app, reason="fine")
    result = app.run(trip, "Plan a trip", workflow_id="t1")

    assert result == "done: sunny in Paris; sunny in Rome; charged 42 for o-1; booked Rome"
    # These names are what runs in flight replay against: changing one is a versioning event.
    assert model_step_name("Assistant") == "Assistant/model"
    assert tool_step_name("Assistant", "weather") == "Assistant/tool/weather"
    assert journal_names(app, "t1") == [
        ("step", "Assistant/model"),
        ("step", "Assistant/tool/weather"),
        ("step", "Assistant/tool/weather"),
        ("step", "Assistant/model"),
        ("step", "Assistant/tool/charge"),
        ("step", "Assistant/model"),
        ("approval", "Assistant/tool/book"),
        ("step", "Assistant/tool/book"),
        ("step", "Assistant/model"),
    ]
    # The approval's replay ran the agent from the top: nothing ran twice.
    assert set(recorder.counts("t1").values()) == {1}
    usage = app.usage("t1")
    assert (usage.input_tokens, usage.output_tokens) == (40, 20)  # 4 model calls of 10 + 5
    (decided,) = app.approvals(pending=False)
    assert decided.subject == "Assistant/tool/book"
    assert decided.details == {
        "agent": "Assistant",
        "tool": "book",
        "arguments": {"city": "Rome"},
        "call_id": "c4",
    }


def test_parallel_tools_keep_their_results_whatever_order_they_finish_in(
    app: stalwart.Stalwart, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)
    rome_done = asyncio.Event()

    @function_tool
    async def weather(city: str) -> str:
        """Today's weather."""
        recorder.executed(f"weather:{city}")
        if city == "Paris":
            await rome_done.wait()  # Paris was called first and finishes last
        else:
            rome_done.set()
        return f"{city}: {'rain' if city == 'Paris' else 'sun'}"

    script = [[call("weather", {"city": c}, f"c{i}") for i, c in enumerate(["Paris", "Rome"])]]

    @app.workflow
    async def forecast() -> str:
        rome_done.clear()
        agent = Agent(name="Forecaster", model=CountingModel(recorder, script), tools=[weather])
        result = await DurableRunner.run(agent, "weather?")
        await replay_from_the_top()
        return str(result.final_output)

    wake_when_waiting(app, "p1")
    assert app.run(forecast, workflow_id="p1") == "done: Paris: rain; Rome: sun"
    assert recorder.counts("p1") == {
        "model:0": 1,
        "weather:Paris": 1,
        "weather:Rome": 1,
        "model:2": 1,
    }
    weather_steps = [e for e in app.journal("p1") if e.name == "Forecaster/tool/weather"]
    assert {e.input["kwargs"]["city"]: e.output for e in weather_steps} == {
        "Paris": "Paris: rain",
        "Rome": "Rome: sun",
    }


def test_a_handoff_makes_the_agent_it_reaches_durable_too(
    app: stalwart.Stalwart, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)
    (tmp_path / "billing").mkdir()
    billing_recorder = Recorder(tmp_path / "billing")
    handed: list[str] = []

    @function_tool
    async def refund(order: str) -> str:
        """Refund ``order``."""
        recorder.executed("refund")
        return f"refunded {order}"

    billing = Agent(
        name="Billing",
        model=CountingModel(billing_recorder, [None, [call("refund", {"order": "o-9"}, "r1")]]),
        tools=[refund],
    )
    triage = Agent(
        name="Triage",
        model=CountingModel(recorder, [[call("transfer_to_billing", {}, "h1")]]),
        handoffs=[handoff(billing, on_handoff=lambda ctx: handed.append("billing"))],
    )
    billing.handoffs = [triage]  # a cycle: each agent is copied once

    @app.workflow
    async def desk(question: str) -> list[str]:
        result = await DurableRunner.run(triage, question)
        await replay_from_the_top()
        return [result.last_agent.name, str(result.final_output)]

    wake_when_waiting(app, "h1")
    last, output = app.run(desk, "refund please", workflow_id="h1")

    assert last == "Billing" and output.endswith("; refunded o-9")
    steps = [name for kind, name in journal_names(app, "h1") if kind == "step"]
    assert steps == ["Triage/model", "Billing/model", "Billing/tool/refund", "Billing/model"]
    assert recorder.counts("h1") == {"model:0": 1, "refund": 1}
    assert billing_recorder.counts("h1") == {"model:1": 1, "model:2": 1}
    # A handoff's own callback is not a step: it runs again on the replay.
    assert handed == ["billing", "billing"]


def test_a_rejected_tool_does_not_run_and_the_model_is_told_why(
    app: stalwart.Stalwart, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)
    script: list[Any] = [[call("book", {"city": "Rome"}, "c1")]]

    @app.workflow
    async def booking() -> str:
        tools = [t for t in trip_agent(CountingModel(recorder), recorder).tools if t.name == "book"]
        agent = Agent(name="Assistant", model=CountingModel(recorder, script), tools=tools)
        return str((await DurableRunner.run(agent, "book it")).final_output)

    decide_when_asked(app, approve=False, reason="over budget")
    result = app.run(booking, workflow_id="r1")

    assert result == "done: Tool execution was not approved: over budget"
    assert "book" not in recorder.counts("r1")


def test_an_unanswered_approval_counts_as_rejected_after_its_timeout(
    app: stalwart.Stalwart, clock: FakeClock, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)
    script: list[Any] = [[call("book", {"city": "Rome"}, "c1")]]

    @app.workflow
    async def booking() -> str:
        tools = [t for t in trip_agent(CountingModel(recorder), recorder).tools if t.name == "book"]
        agent = Agent(name="Assistant", model=CountingModel(recorder, script), tools=tools)
        result = await DurableRunner.run(agent, "book it", approval_timeout=3600)
        return str(result.final_output)

    def jump() -> None:
        deadline = time.monotonic() + WAIT_S
        while not app.approvals() and time.monotonic() < deadline:
            time.sleep(0.01)
        clock.advance(3601)

    threading.Thread(target=jump, daemon=True).start()
    result = app.run(booking, workflow_id="late")

    assert result == "done: Tool execution was not approved: no one answered in time."
    assert "book" not in recorder.counts("late")


class _Flaky(CountingModel):
    """Fails with a connection error twice, then answers."""

    failures = 2

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("provider unreachable")
        return await super().get_response(*args, **kwargs)


def test_model_calls_retry_with_retry_llm_and_settings_reach_the_model(
    app: stalwart.Stalwart, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)
    flaky = _Flaky(recorder, [])
    agent = Agent(
        name="Writer",
        model="gpt-4.1",  # replaced by the run config's model
        model_settings=ModelSettings(temperature=0.25),
    )
    config = RunConfig(model=flaky, model_settings=ModelSettings(max_tokens=64))

    @app.workflow
    async def write() -> str:
        return str((await DurableRunner.run(agent, "a haiku", run_config=config)).final_output)

    assert app.run(write, workflow_id="w1") == "done: "
    attempts = [e.attempt for e in app.journal("w1") if e.name == "Writer/model"]
    assert attempts == [1, 2, 3]
    settings = flaky.seen[0]["settings"]
    assert (settings.temperature, settings.max_tokens) == (0.25, 64)


def test_a_model_error_the_provider_will_not_fix_fails_the_run_at_once(
    app: stalwart.Stalwart, tmp_path: Path
) -> None:
    class BadRequest(Exception):
        status_code = 400

    class Refusing(CountingModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            self.recorder.executed("model")
            raise BadRequest("the prompt is too long")

    recorder = Recorder(tmp_path)
    agent = Agent(name="Writer", model=Refusing(recorder, []))

    @app.workflow
    async def write() -> str:
        return str((await DurableRunner.run(agent, "a haiku")).final_output)

    with pytest.raises(stalwart.WorkflowFailed, match="BadRequest"):
        app.run(write, workflow_id="w400")
    assert recorder.counts("w400") == {"model": 1}


class _Catalog(MCPServer):
    """An MCP server in the test's process: one tool, ``lookup``, counting its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any] | None] = []
        self.listed = 0

    @property
    def name(self) -> str:
        return "catalog"

    async def connect(self) -> None:
        return None

    async def cleanup(self) -> None:
        return None

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[MCPTool]:
        self.listed += 1
        schema = {"type": "object", "properties": {"sku": {"type": "string"}}}
        return [MCPTool(name="lookup", description="Find a product.", inputSchema=schema)]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        self.calls.append(arguments)
        return CallToolResult(content=[TextContent(type="text", text="a red kettle")])

    async def list_prompts(self) -> Any:
        raise NotImplementedError

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


def test_the_tools_of_an_mcp_server_are_steps_too(app: stalwart.Stalwart, tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    catalog = _Catalog()
    script: list[Any] = [[call("lookup", {"sku": "k-1"}, "m1")]]

    @app.workflow
    async def shop() -> str:
        agent = Agent(name="Shop", model=CountingModel(recorder, script), mcp_servers=[catalog])
        result = await DurableRunner.run(agent, "what is k-1?")
        await replay_from_the_top()
        return str(result.final_output)

    wake_when_waiting(app, "m1")
    output = app.run(shop, workflow_id="m1")

    assert "a red kettle" in output
    assert catalog.calls == [{"sku": "k-1"}]  # not again on the replay
    assert catalog.listed >= 3  # listing is a read: each turn lists, the replay too
    steps = [name for kind, name in journal_names(app, "m1") if kind == "step"]
    assert steps == ["Shop/model", "Shop/tool/lookup", "Shop/model"]
