"""Retries the provider directs, with real clients: ``httpx`` and the ``openai`` SDK against a
local OpenAI-compatible server that throttles, fails and answers on demand."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import openai
import pytest

import stalwart
from fake_provider import FakeProvider, Reply, error, malformed, reset, slow
from stalwart import testing
from stalwart.testing import FakeClock


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


@pytest.mark.parametrize(
    ("status", "raised"), [(400, "BadRequestError"), (401, "AuthenticationError")]
)
def test_openai_400_and_401_fail_at_once_under_retry_llm(
    app: stalwart.Stalwart, provider: FakeProvider, status: int, raised: str
) -> None:
    provider.script = [Reply(status, {}, error(status, "bad request or bad key"))]
    agent = _chat_agent(app, _client(provider))

    with pytest.raises(stalwart.WorkflowFailed, match=raised):
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


# -- faults on demand: a throttle window, resets, slow answers, malformed bodies --------------


def _step_entries(app: stalwart.Stalwart, workflow_id: str) -> list[stalwart.JournalEntry]:
    return [e for e in app.journal(workflow_id) if e.kind == "step"]


THROTTLE_S = 7.0
THROTTLED_RUNS = 5


def test_a_throttle_window_is_waited_out_with_one_call_per_run_inside_it(
    tmp_path: Path, provider: FakeProvider
) -> None:
    """Runs started one a second inside a 7 s window where the provider answers every call
    with 429 and Retry-After = the seconds left: each waits what it was told (over 5 s on a
    durable timer, less in its worker thread), so each makes one call inside the
    window and one after it, and none fails. Real time: the server enforces the window."""
    client = _client(provider)
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'throttle.db'}") as app:
        # The timeout is shorter than the waits: they happen between attempts, outside it.
        @app.step(retry=stalwart.Retry.llm(), timeout=3.0)
        def chat(prompt: str) -> str:
            completion = client.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": prompt}],
                extra_headers={"x-run-id": stalwart.workflow_id()},
            )
            return completion.choices[0].message.content or ""

        @app.workflow
        def agent(prompt: str) -> str:
            return chat(prompt)

        worker = testing.worker(app, concurrency=THROTTLED_RUNS + 2)
        serving = threading.Thread(target=worker.serve, daemon=True)
        serving.start()
        try:
            window = provider.throttle(THROTTLE_S)
            handles = []
            for i in range(THROTTLED_RUNS):
                handles.append(app.start(agent, f"question {i}", workflow_id=f"run-{i}"))
                time.sleep(1.0)
            assert time.monotonic() < window.end  # every run started inside the window
            assert [h.result(timeout=60) for h in handles] == ["ok"] * THROTTLED_RUNS
            finished = time.monotonic()
        finally:
            worker.stop()
            serving.join(timeout=30)

        assert finished - window.start >= THROTTLE_S - 0.5
        assert app.list_workflows(status="failed") == []
        assert app.list_workflows(status="needs_attention") == []
        assert provider.per_run() == {f"run-{i}": 2 for i in range(THROTTLED_RUNS)}
        durable = 0
        for i in range(THROTTLED_RUNS):
            inside, after = provider.calls_of(f"run-{i}")
            assert (inside.status, inside.throttled) == (429, True)
            assert (after.status, after.throttled) == (200, False)
            assert window.end <= after.at < window.end + 5.0  # told when, came back then
            told = math.ceil(window.end - inside.at)
            suspended = "suspended" in [e.name for e in app.journal(f"run-{i}") if e.kind == "run"]
            assert suspended == (told > 5)  # a wait over 5 s is a durable timer
            durable += suspended
            failed, done = _step_entries(app, f"run-{i}")
            assert (failed.attempt, failed.status, done.attempt, done.status) == (
                1,
                "failed",
                2,
                "completed",
            )
            assert failed.error is not None
            assert failed.error.startswith("RateLimitError: ")
            assert failed.error.endswith(f"[Retry-After: {told} s]")  # the server's delay
            assert app.usage(f"run-{i}").attempts == 2
        assert 1 <= durable < THROTTLED_RUNS  # both kinds of wait were exercised


def test_a_reset_connection_is_retried_under_retry_llm(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    """The openai SDK raises APIConnectionError (no HTTP status) when the provider resets
    the connection without answering: retried, and the run completes."""
    provider.script = [reset()]
    agent = _chat_agent(app, _client(provider))

    assert app.run(agent, workflow_id="reset") == "ok"
    assert [c.status for c in provider.calls] == [None, 200]  # None: no answer
    failed, done = _step_entries(app, "reset")
    assert failed.error == "APIConnectionError: Connection error."
    assert (done.attempt, done.status) == (2, "completed")


def test_httpx_sees_a_reset_as_a_read_error_and_retries(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    provider.script = [reset()]

    @app.step(retry=stalwart.Retry.llm())
    def ask() -> str:
        response = httpx.post(f"{provider.url}/chat/completions", json={"user": "r-1"})
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"])

    @app.workflow
    def agent() -> str:
        return ask()

    assert app.run(agent, workflow_id="reset-httpx") == "ok"
    assert len(provider.calls_of("r-1")) == 2  # the run named in the body's "user" field
    failed, _ = _step_entries(app, "reset-httpx")
    assert failed.error is not None and failed.error.startswith("ReadError: ")


STEP_TIMEOUT_S = 0.5
SLOW_S = 5.0  # far past the step's timeout; the fixture's shutdown cuts it short


def test_a_slow_answer_past_the_step_timeout_is_a_timed_out_attempt_that_is_retried(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    """A plain def step is abandoned at its timeout (its thread keeps waiting for the slow
    answer, which is discarded); the retry gets the next, prompt answer."""
    provider.script = [slow(SLOW_S)]
    client = _client(provider)

    @app.step(retry=stalwart.Retry.llm(), timeout=STEP_TIMEOUT_S)
    def chat() -> str:
        completion = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )
        return completion.choices[0].message.content or ""

    @app.workflow
    def agent() -> str:
        return chat()

    began = time.monotonic()
    assert app.run(agent, workflow_id="slow") == "ok"
    assert time.monotonic() - began < SLOW_S  # it did not wait for the slow answer
    assert len(provider.calls) == 2
    failed, done = _step_entries(app, "slow")
    assert failed.error is not None and failed.error.startswith("StepTimeout: ")
    assert (done.attempt, done.status) == (2, "completed")


def test_an_async_step_past_its_timeout_is_cancelled_and_retried(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    provider.script = [slow(SLOW_S)]

    @app.step(retry=stalwart.Retry.llm(), timeout=STEP_TIMEOUT_S)
    async def chat() -> str:
        async with openai.AsyncOpenAI(
            base_url=provider.url, api_key="test-key", max_retries=0
        ) as client:
            completion = await client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}]
            )
        return completion.choices[0].message.content or ""

    @app.workflow
    async def agent() -> str:
        return await chat()

    began = time.monotonic()
    assert app.run(agent, workflow_id="slow-async") == "ok"
    assert time.monotonic() - began < SLOW_S
    assert len(provider.calls) == 2
    failed, _ = _step_entries(app, "slow-async")
    assert failed.error is not None and "was cancelled" in failed.error


def test_the_sdks_own_timeout_is_an_apitimeouterror_that_is_retried(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    provider.script = [slow(SLOW_S)]
    client = openai.OpenAI(
        base_url=provider.url, api_key="test-key", max_retries=0, timeout=STEP_TIMEOUT_S
    )
    agent = _chat_agent(app, client)

    assert app.run(agent, workflow_id="sdk-timeout") == "ok"
    assert len(provider.calls) == 2
    failed, _ = _step_entries(app, "sdk-timeout")
    assert failed.error == "APITimeoutError: Request timed out."


def test_a_malformed_200_body_is_retried_under_retry_llm(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    """The openai SDK does not wrap a body it cannot parse: it raises json.JSONDecodeError,
    which carries no HTTP status. Retry.llm() fails at once only on a 4xx, so it retries,
    as it retries any error without one, and the next answer completes the run."""
    provider.script = [malformed()]
    agent = _chat_agent(app, _client(provider))

    assert app.run(agent, workflow_id="malformed") == "ok"
    assert len(provider.calls) == 2
    failed, done = _step_entries(app, "malformed")
    assert failed.error is not None and failed.error.startswith("JSONDecodeError: ")
    assert (done.attempt, done.status) == (2, "completed")


# asyncio's default executor: min(32, CPUs + 4) threads (6 on a 2-core machine).
DEFAULT_EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)


def test_async_runs_waiting_out_a_throttle_window_all_come_back_when_it_ends(
    tmp_path: Path, provider: FakeProvider
) -> None:
    """More async runs than the default executor has threads, in one worker, all told to
    come back in under 3 s (retry-after-ms, exact): each should call again right at the
    window's end, as the sync runs of the 7 s test do."""
    runs = DEFAULT_EXECUTOR_THREADS + 2
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'async-throttle.db'}") as app:

        @app.step(retry=stalwart.Retry.llm(), timeout=10.0)
        async def chat() -> str:
            async with openai.AsyncOpenAI(
                base_url=provider.url, api_key="test-key", max_retries=0
            ) as client:
                completion = await client.chat.completions.create(
                    model="fake-model",
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"x-run-id": stalwart.workflow_id()},
                )
            return completion.choices[0].message.content or ""

        @app.workflow
        async def agent() -> str:
            return await chat()

        worker = testing.worker(app, concurrency=runs + 2)
        serving = threading.Thread(target=worker.serve, daemon=True)
        serving.start()
        try:
            window = provider.throttle(3.0, millis=True)
            handles = [app.start(agent, workflow_id=f"async-{i}") for i in range(runs)]
            assert [h.result(timeout=60) for h in handles] == ["ok"] * runs
        finally:
            worker.stop()
            serving.join(timeout=30)

    assert provider.per_run() == {f"async-{i}": 2 for i in range(runs)}  # none wasted
    late = [provider.calls_of(f"async-{i}")[1].at - window.end for i in range(runs)]
    assert min(late) >= 0
    # A run whose wait queued behind another's (a thread of the default executor each) would
    # come back a whole window late; under load all came back up to 1.07 s after its end.
    assert max(late) < 2.0, f"seconds after the window's end: {sorted(late)}"


def _tagging_agent(
    app: stalwart.Stalwart, provider: FakeProvider, step: str, keys: list[str]
) -> Any:
    """A workflow whose step ``step`` calls the provider through the real ``openai`` SDK with
    ``extra_headers=stalwart.request_headers()``, noting each attempt's idempotency key."""
    client = _client(provider)

    @app.step(name=step, retry=stalwart.Retry.llm())
    def chat() -> Any:
        keys.append(stalwart.idempotency_key())
        return client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers=stalwart.request_headers(),
        )

    @app.workflow
    def agent() -> str:
        return str(chat()["choices"][0]["message"]["content"])

    return agent


def test_request_headers_tag_each_provider_call_with_its_run_and_step(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    """``extra_headers=stalwart.request_headers()`` on the real ``openai`` SDK: the server sees
    the run, the step and the step's idempotency key, the same on the retry."""
    provider.script = [Reply(503, {}, error(503, "overloaded"))]
    keys: list[str] = []
    agent = _tagging_agent(app, provider, "chat", keys)
    assert app.run(agent, workflow_id="tagged") == "ok"
    assert len(provider.received) == 2 and keys[0] == keys[1]
    for headers in provider.received:
        assert headers["x-stalwart-run-id"] == "tagged"
        assert headers["x-stalwart-step"] == "chat"
        assert headers["idempotency-key"] == keys[0]


def test_request_headers_of_a_non_ascii_run_are_sent_percent_encoded(
    app: stalwart.Stalwart, provider: FakeProvider
) -> None:
    """httpx (so the ``openai`` SDK) refuses a header value outside ASCII: a run id such as
    ``commande-é`` is sent percent-encoded, and ``unquote`` gives it back."""
    agent = _tagging_agent(app, provider, "étape 1", [])
    assert app.run(agent, workflow_id="commande-é 100%") == "ok"
    (headers,) = provider.received
    assert headers["x-stalwart-run-id"] == "commande-%C3%A9 100%25"
    assert unquote(headers["x-stalwart-run-id"]) == "commande-é 100%"
    assert unquote(headers["x-stalwart-step"]) == "étape 1"
    assert unquote(headers["idempotency-key"]).startswith("commande-é 100%")


def test_request_headers_outside_a_step_are_refused(app: stalwart.Stalwart) -> None:
    with pytest.raises(stalwart.InvalidOperation, match="inside a step"):
        stalwart.request_headers()

    @app.workflow
    def agent() -> None:
        stalwart.request_headers()  # workflow code, not a step

    with pytest.raises(stalwart.WorkflowFailed, match="inside a step"):
        app.run(agent, workflow_id="untagged")
