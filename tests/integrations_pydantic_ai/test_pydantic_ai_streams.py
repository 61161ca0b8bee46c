"""``StalwartDurability`` emits the model's text to the run's stream ``"default"`` as ``str``
chunks, inside the model request's step: a streamed request delta by delta as the model
streams, one that is not streamed whole; a completed request replays without emitting again,
and outside a workflow the agent runs as an ordinary pydantic-ai agent."""

from __future__ import annotations

from collections.abc import AsyncIterable

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai_scripts import Script, call, text

import stalwart
from stalwart import stream_text
from stalwart.integrations.pydantic_ai import StalwartDurability


class Crash(BaseException):
    """Stands in for kill -9 in the middle of a step."""


def test_a_streamed_request_emits_each_text_delta_inside_its_step(app: stalwart.Stalwart) -> None:
    seen: list[str] = []

    async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event.event_kind)  # the user's handler still sees every event

    agent = Agent(
        Script([text("durable streams are here")]).model(),
        name="writer",
        capabilities=[StalwartDurability(event_stream_handler=handler)],
    )

    @app.workflow
    async def write() -> str:
        return (await agent.run("write")).output

    assert app.run(write, workflow_id="streamed") == "durable streams are here "
    chunks = list(app.stream("streamed", follow=False))
    assert [c.data for c in chunks] == ["durable ", "streams ", "are ", "here "]
    step = next(e for e in app.journal("streamed") if e.name == "writer__model.request_stream")
    assert {c.seq for c in chunks} == {step.seq}  # emitted by the request's own step
    assert "part_start" in seen


def test_run_stream_emits_the_deltas_and_a_replayed_request_emits_nothing_again(
    app: stalwart.Stalwart,
) -> None:
    crashing = {"on": True}
    agent = Agent(
        Script([call("add", a=1, b=2), text("the sum is 3")]).model(),
        name="adder",
        capabilities=[StalwartDurability()],
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        if crashing["on"]:
            raise Crash()
        return a + b

    @app.workflow
    async def run() -> str:
        async with agent.run_stream("add") as result:
            return await result.get_output()

    with pytest.raises(Crash):
        app.run(run, workflow_id="replayed")
    crashing["on"] = False
    assert app.run(run, workflow_id="replayed") == "the sum is 3 "
    assert stream_text(app.stream("replayed", follow=False)) == "the sum is 3 "


def test_a_request_not_streamed_emits_its_text_whole_and_outside_a_run_nothing(
    app: stalwart.Stalwart,
) -> None:
    agent = Agent(
        Script([text("whole answer")]).model(),
        name="plain",
        capabilities=[StalwartDurability()],
    )

    @app.workflow
    async def ask() -> str:
        return (await agent.run("ask")).output

    assert app.run(ask, workflow_id="whole") == "whole answer"
    assert [c.data for c in app.stream("whole", follow=False)] == ["whole answer"]
    assert agent.run_sync("outside").output == "whole answer"  # no run: nothing to emit to
