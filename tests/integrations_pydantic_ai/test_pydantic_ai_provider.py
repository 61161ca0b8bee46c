"""A durable pydantic-ai agent on a real provider client: pydantic-ai's OpenAI model, through
the ``openai`` SDK (its own retries off), against the local OpenAI-compatible server of
``tests/fake_provider.py``. Inside a throttle window every request gets 429 with Retry-After;
``Retry.llm()`` on the model step waits what the server said, so no run is dead-lettered."""

from __future__ import annotations

import math
import threading
import time

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import stalwart
from fake_provider import FakeProvider, Reply, completion
from stalwart import testing
from stalwart.integrations.pydantic_ai import StalwartDurability

THROTTLE_S = 7.0
RUNS = 4
MODEL_STEP = "assistant__model.request"


def test_a_throttle_window_is_waited_out_and_no_run_is_dead_lettered(
    agent_url: str, provider: FakeProvider
) -> None:
    """Runs start one a second inside a 7 s window: each model step's first attempt gets a 429
    telling it the seconds left, the step waits that long (over 5 s on a durable timer, the
    run replayed after it), and its second attempt, after the window, succeeds."""
    client = openai.AsyncOpenAI(base_url=provider.url, api_key="test-key", max_retries=0)
    model = OpenAIChatModel("fake-model", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="assistant", capabilities=[StalwartDurability()])

    with stalwart.Stalwart(agent_url) as app:

        @app.workflow
        async def ask(question: str) -> str:
            headers = {"x-run-id": stalwart.workflow_id()}  # the server counts calls per run
            result = await agent.run(question, model_settings={"extra_headers": headers})
            return result.output

        worker = testing.worker(app, concurrency=RUNS + 2)
        serving = threading.Thread(target=worker.serve, daemon=True)
        serving.start()
        try:
            window = provider.throttle(THROTTLE_S)
            handles = []
            for i in range(RUNS):
                handles.append(app.start(ask, f"question {i}", workflow_id=f"ask-{i}"))
                time.sleep(1.0)
            assert time.monotonic() < window.end  # every run started inside the window
            assert [h.result(timeout=60) for h in handles] == ["ok"] * RUNS
        finally:
            worker.stop()
            serving.join(timeout=30)

        assert app.list_workflows(status="failed") == []
        assert app.list_workflows(status="needs_attention") == []
        assert provider.per_run() == {f"ask-{i}": 2 for i in range(RUNS)}
        durable = 0
        for i in range(RUNS):
            inside, after = provider.calls_of(f"ask-{i}")
            assert (inside.status, inside.throttled) == (429, True)
            assert (after.status, after.throttled) == (200, False)
            told = math.ceil(window.end - inside.at)
            steps = [e for e in app.journal(f"ask-{i}") if e.kind == "step"]
            assert [(e.name, e.status, e.attempt) for e in steps] == [
                (MODEL_STEP, "failed", 1),
                (MODEL_STEP, "completed", 2),
            ]
            error = steps[0].error
            assert error is not None and error.startswith("ModelRateLimitError: status_code: 429")
            assert error.endswith(f"[Retry-After: {told} s]")  # the server's delay
            durable += "suspended" in [e.name for e in app.journal(f"ask-{i}") if e.kind == "run"]
        assert durable >= 1  # the first run was told 7 s: a durable timer, then a replay


@pytest.mark.parametrize("answered_by", ["fake-model", "openai/fake-model"])
def test_a_cost_budget_stops_a_pydantic_ai_agent(
    agent_url: str, provider: FakeProvider, answered_by: str
) -> None:
    """Each model call (3 tokens in, 2 out, from the response of model ``fake-model``) costs
    1.0 at the app's prices: with ``max_cost=2.5`` the fourth call never reaches the server.
    A response naming the model with its provider's prefix, as a router answers
    (``openai/fake-model``), is priced by the name after it."""
    provider.script = [Reply(body=completion("ok") | {"model": answered_by})] * 3
    client = openai.AsyncOpenAI(base_url=provider.url, api_key="test-key", max_retries=0)
    model = OpenAIChatModel("fake-model", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="assistant", capabilities=[StalwartDurability()])
    prices = {"fake-model": (200_000.0, 200_000.0)}  # per million tokens: 0.6 + 0.4 a call

    with stalwart.Stalwart(agent_url, prices=prices) as app:

        @app.workflow(budget=stalwart.Budget(max_cost=2.5))
        async def chatty(turns: int) -> int:
            for turn in range(turns):
                await agent.run(f"question {turn}")
            return turns

        with pytest.raises(stalwart.BudgetExceeded, match="max_cost=2.5"):
            app.run(chatty, 10, workflow_id="chatty")
        assert len(provider.calls) == 3
        spent = app.usage("chatty")
        assert (spent.input_tokens, spent.output_tokens, spent.attempts) == (9, 6, 3)
        assert spent.cost == pytest.approx(3.0)
        models = [e for e in app.journal("chatty") if e.name == MODEL_STEP]
        assert [e.usage.cost if e.usage else None for e in models] == pytest.approx([1.0] * 3)
