"""The agent against the local OpenAI-compatible server (``tests/fake_provider.py``) through the
real ``openai`` client and the SDK's ``OpenAIChatCompletionsModel``: while a throttle window
answers 429 with ``Retry-After``, each model step waits what the server said and tries again;
every run completes (none dead-lettered) and each answered call happened once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

import stalwart
from fake_provider import FakeProvider, Reply, completion, fake_provider
from stalwart.integrations.openai_agents import DurableRunner, model_step_name

RUNS = 4
WINDOW_S = 2.0


def tool_calls(*cities: str) -> dict[str, Any]:
    """A chat completion asking for ``weather`` in each of ``cities``, in parallel."""
    body = completion("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "weather", "arguments": json.dumps({"city": city})},
            }
            for i, city in enumerate(cities)
        ],
    }
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """The fake server, answering each run's first call with two tool calls and its next
    with a text (by the run's ``x-run-id``; a throttled call does not count)."""
    with fake_provider() as running:
        answer = running.next_reply

        def next_reply(path: str, run: str | None = None) -> Reply:
            reply = answer(path, run)
            if reply.status != 200:
                return reply
            answered = [c for c in running.calls_of(run or "") if c.status == 200]
            if len(answered) == 1:
                return Reply(body=tool_calls("Paris", "Rome"))
            return Reply(body=completion(f"packed for {run}"))

        running.next_reply = next_reply  # type: ignore[method-assign]
        yield running


def test_a_throttle_window_dead_letters_no_run(provider: FakeProvider, tmp_path: Path) -> None:
    executed: list[str] = []

    @function_tool
    async def weather(city: str) -> str:
        """Today's weather in ``city``."""
        executed.append(f"{stalwart.workflow_id()}:{city}")
        return f"sunny in {city}"

    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:
        holder: dict[str, Any] = {}

        @app.workflow
        async def trip(question: str) -> str:
            run = stalwart.workflow_id()
            agent = Agent(
                name="Assistant",
                instructions="Pack for the weather.",
                model=holder["model"],
                model_settings=ModelSettings(extra_headers={"x-run-id": run}),
                tools=[weather],
            )
            return str((await DurableRunner.run(agent, question)).final_output)

        async def main() -> list[Any]:
            # The SDK's own retries are off: each attempt is one journaled HTTP call.
            client = AsyncOpenAI(base_url=provider.url, api_key="test-key", max_retries=0)
            holder["model"] = OpenAIChatCompletionsModel("fake-model", openai_client=client)
            provider.throttle(WINDOW_S)
            runs = [
                app.run_async(trip, "What do I pack?", workflow_id=f"r{n}") for n in range(RUNS)
            ]
            try:
                return await asyncio.gather(*runs, return_exceptions=True)
            finally:
                await client.close()

        results = asyncio.run(main())

        assert results == [f"packed for r{n}" for n in range(RUNS)]
        assert app.count_workflows(status="failed") == 0
        assert app.count_workflows(status="needs_attention") == 0
        for n in range(RUNS):
            calls = provider.calls_of(f"r{n}")
            assert [c.status for c in calls if not c.throttled] == [200, 200]
            assert any(c.throttled for c in calls)  # every run began inside the window
            attempts = [e for e in app.journal(f"r{n}") if e.name == model_step_name("Assistant")]
            waited = [e.error for e in attempts if e.status == "failed"]
            assert waited and all(error and "[Retry-After: " in error for error in waited)
        assert sorted(executed) == sorted(
            f"r{n}:{c}" for n in range(RUNS) for c in ("Paris", "Rome")
        )


@pytest.mark.parametrize("model_name", ["fake-model", "openai/fake-model"])
def test_a_cost_budget_stops_an_openai_agents_run(tmp_path: Path, model_name: str) -> None:
    """Each model call (3 tokens in, 2 out, model ``fake-model``) costs 1.0 at the app's
    prices: with ``max_cost=2.5`` the fourth call never reaches the server. A model named
    with its provider's prefix (``openai/fake-model``) is priced by the name after it."""
    prices = {"fake-model": (200_000.0, 200_000.0)}  # per million tokens: 0.6 + 0.4 a call
    with (
        fake_provider() as server,
        stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}", prices=prices) as app,
    ):
        holder: dict[str, Any] = {}

        @app.workflow(budget=stalwart.Budget(max_cost=2.5))
        async def chatty(turns: int) -> int:
            agent = Agent(name="Assistant", instructions="Answer.", model=holder["model"])
            for turn in range(turns):
                await DurableRunner.run(agent, f"question {turn}")
            return turns

        async def main() -> None:
            client = AsyncOpenAI(base_url=server.url, api_key="test-key", max_retries=0)
            holder["model"] = OpenAIChatCompletionsModel(model_name, openai_client=client)
            try:
                with pytest.raises(stalwart.BudgetExceeded, match="max_cost=2.5"):
                    await app.run_async(chatty, 10, workflow_id="chatty")
            finally:
                await client.close()

        asyncio.run(main())
        assert len(server.calls) == 3
        spent = app.usage("chatty")
        assert (spent.input_tokens, spent.output_tokens, spent.attempts) == (9, 6, 3)
        assert spent.cost == pytest.approx(3.0)
