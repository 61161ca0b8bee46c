"""What ``DurableRunner`` refuses, and what it does outside a workflow."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import RunState, WebSearchTool, function_tool
from oa_scripted import CountingModel, Recorder, trip_agent

import stalwart
from stalwart.integrations.openai_agents import DurableRunner, StreamingRefused, tool_options


def test_run_streamed_refuses_a_run_state(tmp_path: Path) -> None:
    """Streaming is durable since 0.3 (``test_oa_streamed.py``); a RunState is refused as by
    ``run``, and ``StreamingRefused`` stays importable for callers that catch it."""
    recorder = Recorder(tmp_path)
    agent = trip_agent(CountingModel(recorder), recorder)
    with pytest.raises(stalwart.UsageError, match="not a RunState"):
        DurableRunner.run_streamed(agent, RunState.__new__(RunState))  # type: ignore[arg-type]
    assert issubclass(StreamingRefused, stalwart.UsageError)


def test_run_sync_is_refused_inside_a_workflow(app: stalwart.Stalwart, tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)

    @app.workflow
    def blocking() -> str:
        agent = trip_agent(CountingModel(recorder), recorder)
        return str(DurableRunner.run_sync(agent, "hi").final_output)

    with pytest.raises(stalwart.WorkflowFailed, match="make the workflow 'async def'"):
        app.run(blocking, workflow_id="s1")
    assert recorder.counts("s1") == {}


def test_outside_a_workflow_it_runs_as_runner_does_and_leaves_approvals_to_the_caller(
    tmp_path: Path,
) -> None:
    recorder = Recorder(tmp_path)
    agent = trip_agent(CountingModel(recorder), recorder)

    result = DurableRunner.run_sync(agent, "Plan a trip")

    (pending,) = result.interruptions
    assert pending.tool_name == "book"
    assert recorder.counts("-") == {
        "model:0": 1,
        "weather:Paris": 1,
        "weather:Rome": 1,
        "model:2": 1,
        "charge": 1,
        "model:3": 1,
    }


def test_a_run_state_is_refused_as_input(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    agent = trip_agent(CountingModel(recorder), recorder)
    state: RunState[Any] = DurableRunner.run_sync(agent, "Plan a trip").to_state()

    with pytest.raises(stalwart.UsageError, match="not a RunState"):
        asyncio.run(DurableRunner.run(agent, state))  # type: ignore[arg-type]


def test_tool_options_check_what_they_are_given() -> None:
    @function_tool
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    with pytest.raises(stalwart.UsageError, match="add irreversible=True"):
        tool_options(pay, verify=lambda amount: None)
    with pytest.raises(TypeError, match="pass a stalwart.Retry"):
        tool_options(pay, retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="put it above @function_tool"):
        tool_options(irreversible=True)(WebSearchTool())  # type: ignore[arg-type]
    assert tool_options(pay, irreversible=True) is pay


def test_the_agents_it_is_given_are_left_as_they_were(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    model = CountingModel(recorder)
    agent = trip_agent(model, recorder)
    tools = list(agent.tools)

    DurableRunner.run_sync(agent, "Plan a trip")

    assert agent.model is model and agent.tools == tools
    assert all(not hasattr(t, "_stalwart_durable") for t in agent.tools)
