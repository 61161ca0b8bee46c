"""Usage: what a run's model calls used, attempt by attempt, failed attempts included, read
from the responses themselves (the openai SDK against a local fake provider) or recorded by
the step, and priced with the app's price table."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import stalwart
import stalwart.testing
from fake_provider import FakeProvider, Reply, completion, error


@pytest.fixture
def priced_app(store_url: str) -> Iterator[stalwart.Stalwart]:
    prices = {"fake-model": (2.0, 8.0)}  # per million tokens in, out
    with stalwart.Stalwart(store_url, clock=stalwart.testing.FakeClock(), prices=prices) as app:
        yield app


def test_a_response_with_usage_is_recorded_and_priced(
    priced_app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    app = priced_app
    answer = completion("ok") | {"usage": {"prompt_tokens": 1000, "completion_tokens": 250}}
    provider.script = [Reply(503, {}, error(503, "overloaded")), Reply(body=answer)]
    client = openai.OpenAI(base_url=provider.url, api_key="test-key", max_retries=0)

    @app.step(retry=stalwart.Retry.llm())
    def chat() -> Any:
        return client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        ).model_dump()

    @app.workflow
    def agent() -> str:
        return str(chat()["choices"][0]["message"]["content"])

    assert app.run(agent, workflow_id="priced") == "ok"
    steps = [e for e in app.journal("priced") if e.kind == "step"]
    assert [e.usage for e in steps] == [
        None,  # the 503 used nothing
        stalwart.Usage(1000, 250, (1000 * 2.0 + 250 * 8.0) / 1e6, 1),
    ]
    assert app.usage("priced") == stalwart.Usage(1000, 250, 0.004, 2)


def test_record_usage_counts_failed_attempts_too(app: stalwart.Stalwart) -> None:
    @app.step(retry=stalwart.Retry(max_attempts=3))
    def call_model() -> str:
        stalwart.record_usage(input_tokens=100, output_tokens=10, cost=0.5, model="m")
        if stalwart.attempt() < 3:
            raise ConnectionError("reset")
        return "done"

    @app.workflow
    def agent() -> str:
        return call_model()

    assert app.run(agent, workflow_id="spent") == "done"
    assert [e.usage for e in app.journal("spent") if e.kind == "step"] == [
        stalwart.Usage(100, 10, 0.5, 1)
    ] * 3
    assert app.usage("spent") == stalwart.Usage(300, 30, 1.5, 3)


def _irreversible_that_times_out_once(app: stalwart.Stalwart) -> Any:
    """An async irreversible step whose first attempt records 100 tokens in and 10 out, then
    outlives its timeout; verify finds no effect, so attempt 2 runs (and records as much)."""
    never = asyncio.Event()

    @app.step(irreversible=True, timeout=0.05, verify=lambda: None)
    async def send() -> str:
        stalwart.record_usage(input_tokens=100, output_tokens=10, cost=0.5, model="m")
        if stalwart.attempt() == 1:
            await never.wait()  # abandoned at its timeout
        return "sent"

    return send


def test_an_irreversible_step_that_times_out_keeps_the_usage_it_recorded(
    app: stalwart.Stalwart,
) -> None:
    send = _irreversible_that_times_out_once(app)

    @app.workflow
    async def notify() -> str:
        return str(await send())

    assert app.run(notify, workflow_id="timed-out") == "sent"
    steps = [e for e in app.journal("timed-out") if e.kind == "step"]
    doubt = next(e for e in steps if e.status == "in_doubt")
    assert doubt.usage == stalwart.Usage(100, 10, 0.5, 1)
    assert app.usage("timed-out") == stalwart.Usage(200, 20, 1.0, 2)


def test_a_budget_counts_the_usage_of_an_irreversible_step_that_timed_out(
    app: stalwart.Stalwart,
) -> None:
    send = _irreversible_that_times_out_once(app)
    after: list[int] = []

    @app.step
    async def then() -> None:
        after.append(1)

    @app.workflow(budget=stalwart.Budget(max_tokens=200))
    async def notify() -> None:
        await send()  # 110 tokens timed out, 110 more completed: 220 >= 200
        await then()

    with pytest.raises(stalwart.BudgetExceeded, match="max_tokens=200"):
        app.run(notify, workflow_id="over-budget")
    assert after == []


def test_a_later_invocation_counts_the_usage_of_an_attempt_left_in_doubt(
    app: stalwart.Stalwart,
) -> None:
    never = asyncio.Event()
    after: list[int] = []

    @app.step(irreversible=True, timeout=0.05)
    async def send() -> str:
        stalwart.record_usage(input_tokens=100, output_tokens=10)
        await never.wait()  # abandoned at its timeout: in doubt, no verify to ask
        return "sent"

    @app.step
    async def then() -> None:
        after.append(1)

    @app.workflow(budget=stalwart.Budget(max_tokens=100))
    async def notify() -> None:
        await send()
        await then()

    with pytest.raises(stalwart.NeedsAttention, match="may have taken effect"):
        app.run(notify, workflow_id="in-doubt")
    app.resolve("in-doubt", 1, result="sent")  # the budget is read again from the journal
    with pytest.raises(stalwart.BudgetExceeded, match="max_tokens=100"):
        app.run(notify, workflow_id="in-doubt")
    assert after == []
    assert app.usage("in-doubt") == stalwart.Usage(100, 10, 0.0, 1)


def test_a_model_named_with_its_providers_prefix_is_priced_by_its_bare_name(
    store_url: str,
) -> None:
    prices = {"gpt-4.1": (2.0, 8.0), "azure/gpt-4.1": (3.0, 12.0)}
    named = ["openai/gpt-4.1", "openai:gpt-4.1", "router/openai/gpt-4.1", "azure/gpt-4.1", "o3"]
    with stalwart.Stalwart(store_url, prices=prices) as app:

        @app.step
        def call(model: str) -> None:
            stalwart.record_usage(input_tokens=1_000_000, output_tokens=0, model=model)

        @app.workflow
        def agent() -> None:
            for model in named:
                call(model)

        app.run(agent, workflow_id="prefixed")
        costs = [e.usage.cost for e in app.journal("prefixed") if e.kind == "step" and e.usage]
    assert costs == [2.0, 2.0, 2.0, 3.0, 0.0]  # an exact name first; o3 is not priced


def test_anthropic_and_pydantic_ai_shapes_are_read_too(app: stalwart.Stalwart) -> None:
    class RunUsage:
        input_tokens = 7
        output_tokens = 3

    class AgentResult:  # pydantic-ai: result.usage() is a method
        output = "hi"

        def usage(self) -> RunUsage:
            return RunUsage()

    @app.step
    def anthropic_style() -> dict[str, Any]:
        return {"model": "claude", "usage": {"input_tokens": 5, "output_tokens": 2}}

    @app.step
    def pydantic_ai_style() -> str:
        result = AgentResult()
        stalwart.record_usage(
            input_tokens=result.usage().input_tokens, output_tokens=result.usage().output_tokens
        )
        return result.output

    @app.workflow
    def agent() -> None:
        anthropic_style()
        pydantic_ai_style()

    app.run(agent, workflow_id="shapes")
    assert app.usage("shapes") == stalwart.Usage(12, 5, 0.0, 2)


def test_a_step_that_used_nothing_has_no_usage(app: stalwart.Stalwart) -> None:
    @app.step
    def plain() -> int:
        return 1

    @app.workflow
    def agent() -> int:
        return plain()

    app.run(agent, workflow_id="plain")
    assert [e.usage for e in app.journal("plain")] == [None] * len(app.journal("plain"))
    assert app.usage("plain") == stalwart.Usage(0, 0, 0.0, 1)


def test_usage_mistakes_are_refused_clearly(app: stalwart.Stalwart) -> None:
    with pytest.raises(RuntimeError, match="inside a step"):
        stalwart.record_usage(input_tokens=1)
    with pytest.raises(stalwart.UsageError, match="tuple"):
        stalwart.Stalwart("memory://", prices={"m": 2.0})  # type: ignore[dict-item]
    with pytest.raises(stalwart.WorkflowNotFound):
        app.usage("nope")

    @app.step(retry=stalwart.Retry.never())
    def negative() -> None:
        stalwart.record_usage(input_tokens=-1)

    @app.workflow
    def agent() -> None:
        negative()

    with pytest.raises(stalwart.WorkflowFailed, match="an int >= 0"):
        app.run(agent, workflow_id="negative")

    @app.step(retry=stalwart.Retry.never())
    def endless() -> None:
        stalwart.record_usage(cost=float("inf"))  # no budget could ever be checked against it

    @app.workflow
    def spender() -> None:
        endless()

    with pytest.raises(stalwart.WorkflowFailed, match="a finite number >= 0"):
        app.run(spender, workflow_id="endless")


def test_stalwart_show_and_ls_print_the_runs_usage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'usage.db'}"
    with stalwart.Stalwart(url) as app:

        @app.step
        def call_model() -> str:
            stalwart.record_usage(input_tokens=40, output_tokens=2, cost=0.25)
            return "yes"

        @app.workflow
        def agent() -> str:
            return call_model()

        app.run(agent, workflow_id="shown")

    def show(*extra: str) -> str:
        return cli("show", "shown", *extra)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "stalwart", "--url", url, *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    assert "usage      40 tokens in, 2 out, cost 0.250000, 1 step attempt(s)" in show()
    detail = json.loads(show("--json"))
    assert detail["usage"] == {
        "input_tokens": 40,
        "output_tokens": 2,
        "cost": 0.25,
        "attempts": 1,
        "partial": False,
    }
    step = next(e for e in detail["journal"] if e["kind"] == "step")
    assert step["usage"] == {
        "input_tokens": 40,
        "output_tokens": 2,
        "cost": 0.25,
        "attempts": 1,
        "partial": False,
    }
    (listed,) = [json.loads(line) for line in cli("ls", "--json").splitlines()]
    assert listed["usage"] == detail["usage"]


def test_usage_of_a_result_the_output_check_refused_is_kept(app: stalwart.Stalwart) -> None:
    def answer(text: str) -> dict[str, Any]:
        return {"text": text, "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}

    replies = iter([answer("not json"), answer('{"ok": true}')])

    def must_be_json(value: dict[str, Any]) -> dict[str, Any]:
        json.loads(value["text"])
        return value

    @app.step(output=must_be_json, retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def call_model() -> dict[str, Any]:
        return next(replies)

    @app.workflow
    def agent() -> str:
        return str(call_model()["text"])

    assert app.run(agent, workflow_id="refused") == '{"ok": true}'
    assert app.usage("refused") == stalwart.Usage(2000, 200, 0.0, 2)


def test_ordinary_results_are_not_read_as_usage(app: stalwart.Stalwart) -> None:
    class Lazy:
        @property
        def usage(self) -> Any:
            raise RuntimeError("not loaded")

    class WithMethod:
        called = 0

        def usage(self) -> dict[str, int]:
            WithMethod.called += 1
            return {"input_tokens": 1, "output_tokens": 1}

    results: list[Any] = [
        {"usage": {"input_tokens": 42, "note": "a field named usage"}},
        {"usage": {"input_tokens": True, "output_tokens": False}},
        Lazy(),
        WithMethod(),
    ]

    @app.step
    def produce(i: int) -> Any:
        return repr(results[i]) if isinstance(results[i], Lazy | WithMethod) else results[i]

    @app.step
    def lazy() -> str:
        value = Lazy()
        stalwart.record_usage()  # nothing
        return type(value).__name__

    @app.workflow
    def agent() -> None:
        for i in range(2):
            produce(i)
        lazy()

    app.run(agent, workflow_id="ordinary")
    assert app.usage("ordinary") == stalwart.Usage(0, 0, 0.0, 3)
    assert WithMethod.called == 0
    assert sum([stalwart.Usage(1, 2), stalwart.Usage(3, 4)]) == stalwart.Usage(4, 6)


def test_a_provider_step_that_records_no_usage_says_how_to_keep_it_once(
    store_url: str, provider: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``Retry.llm()`` step that returns the message text drops the response's usage: one
    WARNING per step name says so (not per call, not per run); a step that returns the
    response, or one under another policy, says nothing."""
    client = openai.OpenAI(base_url=provider.url, api_key="test-key", max_retries=0)

    def ask() -> Any:
        return client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )

    with stalwart.Stalwart(store_url) as app:

        @app.step(name="text_only", retry=stalwart.Retry.llm())
        def text_only() -> str:
            return ask().choices[0].message.content or ""

        @app.step(name="whole_response", retry=stalwart.Retry.llm())
        def whole_response() -> Any:
            return ask()

        @app.step(name="plain_tool")
        def plain_tool() -> str:
            return "no model here"

        @app.workflow
        def agent() -> None:
            text_only()
            text_only()
            whole_response()
            plain_tool()

        with caplog.at_level(logging.WARNING, logger="stalwart"):
            app.run(agent, workflow_id="first")
            app.run(agent, workflow_id="second")
        assert app.usage("second") == stalwart.Usage(3, 2, 0.0, 4)  # whole_response's

    warned = [r.getMessage() for r in caplog.records if "recorded no usage" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "'text_only'" in warned[0]
    assert "return the response" in warned[0] and "output=" in warned[0]
