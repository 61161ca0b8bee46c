"""Budgets and loop detection: a run that reached a limit stops before the attempt that would
spend more, so the money is not spent; an operator continues it with a larger budget."""

from __future__ import annotations

from typing import Any

import openai
import pytest

import stalwart
from fake_provider import fake_provider


def test_a_run_stops_before_the_attempt_past_max_tokens(app: stalwart.Stalwart) -> None:
    calls: list[int] = []

    @app.step
    def think(turn: int) -> str:
        calls.append(turn)
        stalwart.record_usage(input_tokens=50, output_tokens=10)
        return f"thought {turn}"

    @app.workflow(budget=stalwart.Budget(max_tokens=100))
    def agent(turns: int) -> int:
        for turn in range(turns):
            think(turn)
        return turns

    with pytest.raises(stalwart.BudgetExceeded, match="max_tokens=100") as stopped:
        app.run(agent, 5, workflow_id="thinker")
    assert isinstance(stopped.value, stalwart.NeedsAttention)
    assert calls == [0, 1]  # the third attempt, at 120 tokens used, never started
    assert app.handle("thinker").status() == "needs_attention"
    assert app.usage("thinker") == stalwart.Usage(100, 20, 0.0, 2)

    with pytest.raises(stalwart.InvalidOperation, match="raises a limit"):
        app.retry("thinker")
    with pytest.raises(stalwart.InvalidOperation, match="raises a limit"):
        app.retry("thinker", budget=stalwart.Budget(max_tokens=50))
    app.retry("thinker", by="ana", budget=stalwart.Budget(max_tokens=1000))
    assert app.run(agent, 5, workflow_id="thinker") == 5
    assert calls == [0, 1, 2, 3, 4]
    retried = [e for e in app.journal("thinker") if e.kind == "operator" and e.name == "retry"]
    assert retried[-1].by == "ana"
    assert retried[-1].input == {"from_status": "needs_attention", "budget": {"max_tokens": 1000}}


def test_the_same_call_once_too_often_is_a_loop(app: stalwart.Stalwart) -> None:
    calls: list[str] = []

    @app.step
    def search(query: str) -> list[str]:
        calls.append(query)
        return []  # nothing found: the agent asks again

    @app.workflow(budget=stalwart.Budget(max_repeats=2))
    def agent() -> None:
        search("other")
        while not search("flights to Lima"):
            pass

    with pytest.raises(stalwart.LoopDetected, match="max_repeats=2"):
        app.run(agent, workflow_id="looping")
    assert calls == ["other", "flights to Lima", "flights to Lima"]


def test_max_steps_counts_failed_attempts_and_max_cost_uses_the_prices(
    store_url: str,
) -> None:
    clock = stalwart.testing.FakeClock()
    with stalwart.Stalwart(store_url, clock=clock, prices={"m": (1_000_000.0, 0.0)}) as app:
        attempts: list[int] = []

        @app.step(retry=stalwart.Retry(max_attempts=10))
        def flaky_tool() -> None:
            attempts.append(stalwart.attempt())
            raise ConnectionError("the tool is down")

        @app.workflow(budget=stalwart.Budget(max_steps=3))
        def retries_forever() -> None:
            flaky_tool()

        with pytest.raises(stalwart.BudgetExceeded, match="max_steps=3"):
            app.run(retries_forever, workflow_id="flaky")
        assert attempts == [1, 2, 3]

        spent: list[int] = []

        @app.step
        def expensive() -> None:
            spent.append(1)
            stalwart.record_usage(input_tokens=1, model="m")  # 1.0 a call

        @app.workflow(budget=stalwart.Budget(max_cost=2.5))
        def shopping() -> None:
            for _ in range(5):
                expensive()

        with pytest.raises(stalwart.BudgetExceeded, match="max_cost=2.5"):
            app.run(shopping, workflow_id="costly")
        assert len(spent) == 3  # 3.0 spent: the fourth call never started


def test_bad_budgets_are_refused(app: stalwart.Stalwart) -> None:
    with pytest.raises(stalwart.UsageError, match="max_tokens"):
        stalwart.Budget(max_tokens=0)
    with pytest.raises(stalwart.UsageError, match="max_cost"):
        stalwart.Budget(max_cost=-1)
    with pytest.raises(TypeError, match="stalwart.Budget"):
        app.workflow(budget={"max_tokens": 5})(lambda: None)  # type: ignore[arg-type]

    @app.workflow
    def unbudgeted() -> None:
        raise RuntimeError("boom")

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(unbudgeted, workflow_id="unbudgeted")
    with pytest.raises(stalwart.InvalidOperation, match="declares no budget"):
        app.retry("unbudgeted", budget=stalwart.Budget(max_tokens=5))


def test_budgets_and_loops_stop_before_the_call_reaches_the_provider(
    app: stalwart.Stalwart,
) -> None:
    """With the openai SDK against a local provider: the calls a budget or a loop refuses
    never reach the server (each completion uses 3 + 2 tokens)."""
    with fake_provider() as provider:
        client = openai.OpenAI(base_url=provider.url, api_key="test-key", max_retries=0)

        @app.step(retry=stalwart.Retry.llm())
        def chat(question: str) -> Any:
            return client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": question}]
            )

        @app.workflow(budget=stalwart.Budget(max_tokens=12))
        def spender() -> None:
            for turn in range(10):
                chat(f"question {turn}")

        @app.workflow(budget=stalwart.Budget(max_repeats=2))
        def looper() -> None:
            while True:
                chat("the same question")

        with pytest.raises(stalwart.BudgetExceeded, match="max_tokens=12"):
            app.run(spender, workflow_id="spender")
        assert len(provider.calls) == 3  # 5, 10, 15 tokens: the fourth call never left
        assert app.usage("spender") == stalwart.Usage(9, 6, 0.0, 3)

        with pytest.raises(stalwart.LoopDetected, match="max_repeats=2"):
            app.run(looper, workflow_id="looper")
        assert len(provider.calls) == 3 + 2  # the third identical call never left
