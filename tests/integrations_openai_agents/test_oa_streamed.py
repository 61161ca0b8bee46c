"""``DurableRunner.run_streamed`` with the real ``openai`` client and the SDK's
``OpenAIChatCompletionsModel`` against a local server that streams: each model call streams
inside its step, its text deltas emitted to the run's stream ``"default"`` as ``str`` chunks;
``stream_events()`` ends with the final output, and a replay calls the provider no more."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import Agent, OpenAIChatCompletionsModel
from openai import AsyncOpenAI

import stalwart
from fake_stream_provider import StreamingProvider, streaming_provider
from stalwart import stream_text
from stalwart.integrations.openai_agents import DurableRunner

pytestmark = pytest.mark.timeout(60)
WORDS = ["Durable ", "agents ", "stream ", "too."]


@pytest.fixture
def provider() -> Iterator[StreamingProvider]:
    with streaming_provider(WORDS, 0.005) as server:
        yield server


def _agent(provider: StreamingProvider) -> Agent:
    client = AsyncOpenAI(base_url=provider.base_url, api_key="test-key", max_retries=0)
    model = OpenAIChatCompletionsModel("fake-model", openai_client=client)
    return Agent(name="writer", instructions="Write.", model=model)


def test_run_streamed_emits_the_models_text_deltas_inside_its_step(
    app: stalwart.Stalwart, provider: StreamingProvider
) -> None:
    agent = _agent(provider)
    kinds: list[str] = []

    @app.workflow
    async def write() -> str:
        result = DurableRunner.run_streamed(agent, "write")
        async for event in result.stream_events():
            kinds.append(event.type)
        return str(result.final_output)

    assert app.run(write, workflow_id="oa-stream") == provider.text
    chunks = list(app.stream("oa-stream", follow=False))
    assert [c.data for c in chunks] == WORDS
    step = next(e for e in app.journal("oa-stream") if e.kind == "step")
    assert step.name == "writer/model" and {c.seq for c in chunks} == {step.seq}
    assert stream_text(chunks) == provider.text
    assert "raw_response_event" in kinds
    assert provider.requests == 1


def test_outside_a_workflow_run_streamed_is_the_sdks(provider: StreamingProvider) -> None:
    import asyncio

    async def main() -> str:
        result = DurableRunner.run_streamed(_agent(provider), "write")
        async for _event in result.stream_events():
            pass
        return str(result.final_output)

    assert asyncio.run(main()) == provider.text
