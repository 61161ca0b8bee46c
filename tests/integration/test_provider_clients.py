"""Retries the provider directs, with real clients: ``httpx`` and the ``openai`` SDK against a
local OpenAI-compatible server that throttles, fails and answers on demand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

import stalwart
from fake_provider import FakeProvider, Reply, error, fake_provider
from stalwart.testing import FakeClock


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with fake_provider() as running:
        yield running


def test_httpx_429_with_retry_after_waits_what_the_server_said(
    app: stalwart.Stalwart, clock: FakeClock, provider: FakeProvider
) -> None:
    provider.script = [Reply(429, {"Retry-After": "3"}, error(429, "slow down"))]

    @app.step(retry=stalwart.Retry(max_attempts=3, initial_delay=0.25))
    def ask(prompt: str) -> str:
        response = httpx.post(f"{provider.url}/chat/completions", json={"prompt": prompt})
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"])

    @app.workflow
    def agent() -> str:
        return ask("hello")

    assert app.run(agent, workflow_id="throttled") == "ok"
    assert len(provider.calls) == 2
    assert clock.slept == [3.0]  # the server's 3 s, not the policy's jittered 0.25 s
    failed = [e for e in app.journal("throttled") if e.kind == "step" and e.status == "failed"]
    assert len(failed) == 1 and failed[0].error is not None
    assert failed[0].error.startswith("HTTPStatusError: ")
    assert failed[0].error.endswith("[Retry-After: 3 s]")


def _client(provider: FakeProvider, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=provider.url, api_key="test-key", max_retries=max_retries)


def _chat_agent(app: stalwart.Stalwart, client: openai.OpenAI) -> Any:
    """A workflow of one chat step under Retry.llm()."""

    @app.step(retry=stalwart.Retry.llm())
    def chat() -> str:
        completion = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )
        return completion.choices[0].message.content or ""

    @app.workflow
    def agent() -> str:
        return chat()

    return agent


def test_openai_sdk_without_its_own_retries_makes_one_call_per_attempt(
    app: stalwart.Stalwart, clock: FakeClock, provider: FakeProvider
) -> None:
    provider.script = [
        Reply(429, {"retry-after-ms": "1500"}, error(429, "rate limited")),
        Reply(503, {}, error(503, "overloaded")),
    ]
    client = _client(provider)

    @app.step(retry=stalwart.Retry.llm(initial_delay=0.5, max_delay=0.5))
    def chat(prompt: str) -> str:
        completion = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": prompt}]
        )
        return completion.choices[0].message.content or ""

    @app.workflow
    def agent() -> str:
        return chat("hello")

    assert app.run(agent, workflow_id="sdk") == "ok"
    assert len(provider.calls) == 3  # one HTTP call per journaled attempt
    assert clock.slept[0] == 1.5  # retry-after-ms, without jitter
    assert 0.0 <= clock.slept[1] <= 0.5  # no header: the policy's backoff
    attempts = [e.attempt for e in app.journal("sdk") if e.kind == "step"]
    assert attempts == [1, 2, 3]


def test_the_sdks_own_retries_would_hide_calls_inside_one_attempt(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    """Why the docs say max_retries=0: with the SDK's default, one journaled attempt made
    three HTTP calls, and the journal saw none of them."""
    provider.script = [Reply(503, {"retry-after-ms": "1"}, error(503, "overloaded"))] * 2
    agent = _chat_agent(app, _client(provider, max_retries=2))

    assert app.run(agent, workflow_id="hidden") == "ok"
    assert len(provider.calls) == 3
    assert [e.attempt for e in app.journal("hidden") if e.kind == "step"] == [1]


def test_openai_401_fails_at_once_under_retry_llm(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    provider.script = [Reply(401, {}, error(401, "invalid api key"))]
    agent = _chat_agent(app, _client(provider))

    with pytest.raises(stalwart.WorkflowFailed, match="AuthenticationError"):
        app.run(agent, workflow_id="bad-key")
    assert len(provider.calls) == 1


def test_a_demand_past_max_server_delay_fails_the_step_and_says_why(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    provider.script = [Reply(429, {"Retry-After": "86400"}, error(429, "come back tomorrow"))]
    agent = _chat_agent(app, _client(provider))

    with pytest.raises(stalwart.WorkflowFailed, match="longer than max_server_delay=600 s"):
        app.run(agent, workflow_id="tomorrow")
    assert len(provider.calls) == 1
    failed = [e for e in app.journal("tomorrow") if e.kind == "step"][-1]
    assert failed.error is not None
    assert "[Retry-After: 86400 s, longer than max_server_delay=600 s]" in failed.error


def test_a_step_raising_retry_after_waits_that_long(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    tries: list[int] = []

    @app.step(retry=stalwart.Retry(initial_delay=10.0))
    def poll() -> str:
        tries.append(stalwart.attempt())
        if len(tries) == 1:
            raise stalwart.RetryAfter(2, "the report is not ready")
        return "ready"

    @app.workflow
    def agent() -> str:
        return poll()

    assert app.run(agent, workflow_id="poll") == "ready"
    assert clock.slept == [2.0]
    failed = next(e for e in app.journal("poll") if e.status == "failed")
    assert failed.error == "RetryAfter: the report is not ready [RetryAfter: 2 s]"
