"""Bad input is refused with an error that names what and where; nothing recorded is harmed."""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stalwart


def test_unserializable_workflow_arguments_record_nothing(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent(x: Any) -> None:
        return None

    with pytest.raises(stalwart.SerializationError, match=r"workflow 'agent'.*object"):
        app.run(agent, object())
    with pytest.raises(stalwart.SerializationError, match="dict key int"):
        app.start(agent, {1: "a"})
    assert app.list_workflows() == []


def test_unserializable_step_arguments_name_workflow_step_and_type(app: stalwart.Stalwart) -> None:
    calls = []

    @app.step(name="tool")
    def tool(x: Any) -> None:
        calls.append(x)

    @app.workflow(name="agent")
    def agent() -> None:
        tool({"client": object()})

    with pytest.raises(stalwart.WorkflowFailed) as info:
        app.run(agent, workflow_id="u1")
    assert info.value.cause_type == "SerializationError"
    for fragment in ("workflow 'agent'", "step 'tool'", "object", "arguments[0]['client']"):
        assert fragment in info.value.cause_message
    assert calls == []
    assert [e for e in app.journal("u1") if e.kind == "step"] == []


def test_unserializable_step_results_fail_without_retrying(app: stalwart.Stalwart) -> None:
    calls = []

    @app.step(name="tool", retry=stalwart.Retry(max_attempts=5))
    def tool() -> Any:
        calls.append(1)
        return {"socket": object()}

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            tool()
        except stalwart.StepFailed as exc:
            return f"{exc.cause_type}|{exc.attempts}|{exc.cause_message}"
        return "no"

    cause, attempts, message = app.run(agent).split("|")
    assert (cause, attempts, len(calls)) == ("SerializationError", "1", 1)
    assert "step 'tool'" in message and "object" in message and "workflow 'agent'" in message


def test_unserializable_workflow_result(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent() -> Any:
        return object()

    with pytest.raises(stalwart.WorkflowFailed, match="SerializationError"):
        app.run(agent)


def test_names_registered_twice(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def one() -> None: ...

    with pytest.raises(stalwart.RegistrationError, match="'agent'"):

        @app.workflow(name="agent")
        def two() -> None: ...

    @app.step
    def tool() -> None: ...

    with pytest.raises(stalwart.RegistrationError, match="tool"):
        app.step(name=tool.__qualname__)(lambda: None)


def test_wrong_step_arguments_raise_type_error_before_journaling(app: stalwart.Stalwart) -> None:
    calls = []

    @app.step(name="tool")
    def tool(a: int, *, b: int) -> None:
        calls.append(a)

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            tool(1, 2)  # type: ignore[misc]
        except TypeError as exc:
            return str(exc)
        return "no"

    assert "positional" in app.run(agent, workflow_id="t1")
    assert calls == []
    assert [e for e in app.journal("t1") if e.kind == "step"] == []
    with pytest.raises(TypeError):
        app.run(agent, "unexpected")


def test_async_step_in_a_sync_workflow(app: stalwart.Stalwart) -> None:
    @app.step(name="fetch")
    async def fetch() -> int:
        return 1

    @app.workflow(name="agent")
    def agent() -> Any:
        return fetch()

    with pytest.raises(stalwart.WorkflowFailed, match="async step 'fetch'.*sync workflow"):
        app.run(agent)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda app: app.queue(""), ValueError, "non-empty string"),
        (lambda app: app.queue("llm", concurrency=0), ValueError, "concurrency=0"),
        (lambda app: app.queue("llm", rate=2.5), TypeError, "rate=2.5"),
        (lambda app: app.queue("llm", rate=5, period=0), ValueError, "period=0"),
        (lambda app: app.workflow(queue=""), ValueError, "queue=''"),
        (lambda app: app.start("agent", queue=7), ValueError, "queue=7"),
        (lambda app: app.start("agent", priority="high"), TypeError, "priority='high'"),
    ],
)
def test_bad_queue_settings_are_refused_with_what_to_do(
    app: stalwart.Stalwart, call: Any, error: type[Exception], match: str
) -> None:
    @app.workflow(name="agent")
    def agent() -> int:
        return 1

    with pytest.raises(error, match=match):
        call(app)
    assert app.list_workflows() == []


def test_bad_settings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ValueError, match="durability"):
        stalwart.Stalwart(url, durability="fast")
    with pytest.raises(ValueError, match="serializer"):
        stalwart.Stalwart(url, serializer="yaml")
    with pytest.raises(ValueError, match="lease_seconds"):
        stalwart.Stalwart(url, lease_seconds=0)
    with pytest.raises(ValueError, match="max_recoveries"):
        stalwart.Stalwart(url, max_recoveries=0)
    with pytest.raises(TypeError, match="Retry"):
        stalwart.Stalwart("memory://").step(retry=3)  # type: ignore[call-overload]


def test_corrupt_output_names_run_and_seq_and_harms_nothing_else(
    app: stalwart.Stalwart, raw_sql: Callable[..., list[Any]]
) -> None:
    calls = []
    stop = {"on": True}

    @app.step(name="tool")
    def tool(n: int) -> int:
        calls.append(n)
        return n

    @app.step(name="halt")
    def halt() -> None:
        if stop["on"]:
            raise KeyboardInterrupt

    @app.workflow(name="agent")
    def agent() -> int:
        total = tool(1) + tool(2)
        halt()
        return total

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="bad")
    stop["on"] = False
    assert app.run(agent, workflow_id="good") == 3
    raw_sql(
        app,
        "UPDATE journal SET output = :bad WHERE workflow_id = 'bad' AND seq = 2",
        {"bad": bytes.fromhex("DEADBEEF00")},
    )
    with pytest.raises(stalwart.CorruptRecord, match=r"run 'bad', seq 2") as info:
        app.run(agent, workflow_id="bad")
    assert (info.value.workflow_id, info.value.seq) == ("bad", 2)
    assert calls == [1, 2, 1, 2]  # the corrupt step was not silently re-executed
    with pytest.raises(stalwart.CorruptRecord, match="seq 2"):
        app.journal("bad")
    assert app.run(agent, workflow_id="good") == 3
    assert len(app.journal("good")) > 0
    # It waits for an operator (a retry would only fail again), and says why each time.
    assert app.handle("bad").status() == "needs_attention"
    with pytest.raises(stalwart.CorruptRecord, match=r"run 'bad', seq 2"):
        app.run(agent, workflow_id="bad")
    assert calls == [1, 2, 1, 2]


# -- durations: inf (and timedelta.max) is no limit; NaN and negatives are refused ----------

NO_LIMIT = [float("inf"), dt.timedelta.max, 10**400, 1e10]
NO_LIMIT_IDS = ["inf", "timedelta.max", "huge int", "over a century"]
NOT_A_DURATION = [float("nan"), -1, dt.timedelta(seconds=-1), True, "5"]
NOT_A_DURATION_IDS = ["nan", "-1", "negative timedelta", "True", "str"]


@pytest.mark.parametrize("timeout", NO_LIMIT, ids=NO_LIMIT_IDS)
def test_a_step_and_a_workflow_without_a_time_limit_complete(
    app: stalwart.Stalwart, timeout: Any
) -> None:
    @app.step(name="plain", timeout=timeout)
    def plain(x: int) -> int:
        return x + 1

    @app.step(name="awaited", timeout=timeout)
    async def awaited(x: int) -> int:
        return x * 2

    @app.workflow(name="sync", timeout=timeout)
    def sync_agent() -> int:
        return plain(1) + stalwart.run_step("inline", plain, args=(2,), timeout=timeout)

    async def triple(x: int) -> int:
        return x * 3

    @app.workflow(name="async", timeout=timeout)
    async def async_agent() -> int:
        inline = await stalwart.run_step_async("inline2", triple, args=(5,), timeout=timeout)
        return await awaited(3) + inline

    assert app.run(sync_agent, workflow_id="s") == 5  # every attempt failed with OverflowError
    assert app.run(async_agent, workflow_id="a") == 21
    assert [e.status for e in app.journal("s") if e.kind == "step"] == ["completed"] * 2
    assert app.handle("s").result(timeout=timeout) == 5


@pytest.mark.parametrize("timeout", NOT_A_DURATION, ids=NOT_A_DURATION_IDS)
def test_a_timeout_that_is_no_duration_is_refused_where_it_is_given(
    app: stalwart.Stalwart, timeout: Any
) -> None:
    def tool() -> int:
        return 1

    shown = f"timeout={timeout!r}: pass seconds (a number > 0 or a timedelta), or float('inf')"
    for declare in (
        lambda: app.step(timeout=timeout)(tool),
        lambda: app.workflow(name="w", timeout=timeout)(tool),
        lambda: stalwart.run_step("t", tool, timeout=timeout),  # outside a run too
    ):
        with pytest.raises(stalwart.UsageError) as info:
            declare()
        assert str(info.value).startswith(shown)

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            stalwart.run_step("t", tool, timeout=timeout)
        except stalwart.UsageError as exc:
            return str(exc)
        return "accepted"

    assert app.run(agent, workflow_id="r").startswith(shown)
    assert [e for e in app.journal("r") if e.kind == "step"] == []  # nothing was attempted


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: stalwart.Stalwart("memory://", lease_seconds=math.nan), "lease_seconds=nan"),
        (lambda: stalwart.Stalwart("memory://", lease_seconds=math.inf), "lease_seconds=inf"),
        (lambda: stalwart.Breaker("b", window=math.nan), "Breaker(window=nan)"),
        (lambda: stalwart.Breaker("b", cooldown=math.inf), "Breaker(cooldown=inf)"),
        (lambda: stalwart.Breaker("b", cooldown=-1), "Breaker(cooldown=-1)"),
        (lambda: stalwart.Budget(max_cost=math.nan), "Budget(max_cost=nan)"),
        (lambda: stalwart.Budget(max_cost=-1.0), "Budget(max_cost=-1.0)"),
        (lambda: stalwart.Budget(max_tokens=math.nan), "Budget(max_tokens=nan)"),
        (lambda: stalwart.Retry(max_delay=math.nan), "Retry(max_delay=nan)"),
        (lambda: stalwart.Retry(initial_delay=-1), "Retry(initial_delay=-1)"),
        (lambda: stalwart.Retry(backoff=math.nan), "Retry(backoff=nan)"),
        (lambda: stalwart.Retry.llm(max_delay=-5), "Retry(max_delay=-5)"),
    ],
)
def test_every_duration_and_limit_is_checked_by_the_same_rule(make: Any, says: str) -> None:
    with pytest.raises(stalwart.UsageError) as info:
        make()
    message = str(info.value)
    assert message.startswith(f"{says}: pass ") and "\n" not in message


def test_a_queue_period_the_store_cannot_keep_is_refused_before_it_is_written(
    app: stalwart.Stalwart,
) -> None:
    for period in (math.nan, math.inf, -1, 0):
        with pytest.raises(
            stalwart.UsageError,
            match=re.escape(f"app.queue('llm', period={period!r}): pass seconds"),
        ):
            app.queue("llm", rate=1, period=period)  # NaN failed in the store (NOT NULL)
    assert app.queues() == []


def test_a_wait_for_a_result_takes_the_same_timeouts(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent() -> int:
        return 1

    handle = app.start(agent, workflow_id="h")
    for timeout in (math.nan, -1):  # NaN waited forever, -1 timed out at once
        with pytest.raises(stalwart.UsageError, match=re.escape(f"result(timeout={timeout})")):
            handle.result(timeout=timeout)
    assert app.run(agent, workflow_id="h") == 1
    assert handle.result(timeout=math.inf) == 1


def test_limits_given_as_inf_are_no_limits(app: stalwart.Stalwart) -> None:
    budget = stalwart.Budget(max_cost=math.inf, max_tokens=math.inf)  # type: ignore[arg-type]
    assert (budget.max_cost, budget.max_tokens) == (None, None)
    unlimited = stalwart.Retry(max_delay=math.inf, max_server_delay=dt.timedelta.max)
    assert unlimited.max_delay == unlimited.max_server_delay == math.inf
    assert stalwart.Breaker("b", window=dt.timedelta(minutes=2)).window == 120.0


# -- ids and names: no control characters, on every store, before the store is asked -------

BAD_NAMES = ["a\x00b", "line\nbreak", "tab\there", "esc\x1b[0m", "del\x7f", "c1\x85", "\ud800"]
BAD_NAME_IDS = ["NUL", "newline", "tab", "escape", "DEL", "C1", "lone surrogate"]


def _calls(app: stalwart.Stalwart, bad: str) -> dict[str, Callable[[], Any]]:
    """Every entry point of the Python API that takes an id or a name, given ``bad``."""

    def fn() -> None:
        return None

    return {
        "start": lambda: app.start("agent", workflow_id=bad),
        "run": lambda: app.run("agent", workflow_id=bad),
        "start queue": lambda: app.start("agent", queue=bad),
        "workflow name": lambda: app.workflow(name=bad)(fn),
        "workflow queue": lambda: app.workflow(name="other", queue=bad)(fn),
        "step name": lambda: app.step(name=bad)(fn),
        "run_step name": lambda: stalwart.run_step(bad, fn),
        "queue": lambda: app.queue(bad, concurrency=1),
        "breaker": lambda: stalwart.Breaker(bad),
        "send_event id": lambda: app.send_event(bad, "ping"),
        "send_event name": lambda: app.send_event("r", bad),
        "send_event dedup_key": lambda: app.send_event("r", "ping", dedup_key=bad),
        "send_event by": lambda: app.send_event("r", "ping", by=bad),
        "approve approval_id": lambda: app.approve("r", approval_id=bad),
        "reject by": lambda: app.reject("r", by=bad),
        "handle": lambda: app.handle(bad),
        "describe": lambda: app.describe(bad),
        "journal": lambda: app.journal(bad),
        "usage": lambda: app.usage(bad),
        "cancel": lambda: app.cancel(bad),
        "retry": lambda: app.retry(bad),
        "fork source": lambda: app.fork(bad, 1),
        "fork new_id": lambda: app.fork("r", 1, new_id=bad),
        "list by name": lambda: app.list_workflows(name=bad),
        "list by queue": lambda: app.list_workflows(queue=bad),
        "count by name": lambda: app.count_workflows(name=bad),
        "shared_get": lambda: app.shared_get(bad),
        "shared_set": lambda: app.shared_set(bad, 1),
        "shared_set if_version": lambda: app.shared_set(bad, 1, if_version=0),
        "shared_set by": lambda: app.shared_set("k", 1, by=bad),
        "shared_history": lambda: app.shared_history(bad),
        "schedule name": lambda: app.schedule("agent", "@daily", name=bad),
        "unschedule": lambda: app.unschedule(bad),
        "check": lambda: app.check([bad]),
        "serve queues": lambda: app.serve(queues=[bad]),
    }


@pytest.mark.parametrize("bad", BAD_NAMES, ids=BAD_NAME_IDS)
def test_ids_and_names_with_control_characters_are_refused_at_every_entry_point(
    app: stalwart.Stalwart, bad: str
) -> None:
    @app.workflow(name="agent")
    def agent() -> str:
        return "ok"

    assert app.run(agent, workflow_id="r") == "ok"
    refused = {}
    for call, make in _calls(app, bad).items():
        try:
            make()
        except stalwart.UsageError as exc:
            refused[call] = str(exc)
        except Exception as exc:  # what went wrong is the report
            refused[call] = f"not a UsageError: {type(exc).__name__}: {exc}"
        else:
            refused[call] = "accepted"
    wrong = {c: m for c, m in refused.items() if "without control characters" not in m}
    assert wrong == {}
    code = f"U+{ord(next(c for c in bad if not c.isprintable())):04X}"  # which one is named
    assert all(code in message for message in refused.values())
    assert [w.workflow_id for w in app.list_workflows()] == ["r"]  # nothing else was recorded
    assert app.shared_history("k") == [] and app.schedules() == []
    assert [q.name for q in app.queues()] == ["default"]


@pytest.mark.parametrize("bad", ["a\x00b", "two\nlines"], ids=["NUL", "newline"])
def test_workflow_code_is_refused_names_with_control_characters_too(
    app: stalwart.Stalwart, bad: str
) -> None:
    @app.workflow(name="child")
    def child() -> int:
        return 1

    @app.workflow(name="parent")
    def parent() -> list[str]:
        refused = []
        for call in (
            lambda: stalwart.start_child(child, workflow_id=bad),
            lambda: stalwart.start_child(child, queue=bad),
            lambda: stalwart.wait_for_event(bad, timeout=1),
            *([lambda: stalwart.request_approval(bad, timeout=1)] if "\x00" in bad else []),
            lambda: stalwart.patched(bad),
            lambda: stalwart.shared_get(bad),
            lambda: stalwart.shared_set(bad, 1),
        ):
            try:
                call()
            except stalwart.UsageError as exc:
                refused.append(str(exc).split(":")[0])
        return refused

    assert app.run(parent, workflow_id="p") == [
        f"workflow_id={bad!r}",
        f"queue={bad!r}",
        f"wait_for_event(name={bad!r})",
        *([f"request_approval(subject={bad!r})"] if "\x00" in bad else []),
        f"patched(patch_id={bad!r})",
        f"shared_get(key={bad!r})",
        f"shared_set(key={bad!r})",
    ]
    assert [e.kind for e in app.journal("p") if e.kind != "run"] == []  # nothing journaled
    assert [w.workflow_id for w in app.list_workflows()] == ["p"]


def test_an_approval_subject_is_text_for_people_and_may_hold_newlines(
    app: stalwart.Stalwart,
) -> None:
    """A subject labels a decision for a person, like a reason: a newline is kept (a run an
    earlier release recorded with one replays), only NUL is refused."""

    @app.workflow(name="asks")
    def asks() -> bool:
        decision = stalwart.request_approval("Refund 129 EUR\nfor order O-77")
        return decision is not None and decision.approved

    results: list[bool] = []
    runner = threading.Thread(target=lambda: results.append(app.run(asks, workflow_id="s-1")))
    runner.start()
    deadline = time.monotonic() + 30
    while not app.approvals() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the run waits on its approval
    assert [a.subject for a in app.approvals()] == ["Refund 129 EUR\nfor order O-77"]
    app.approve("s-1", by="ops")
    runner.join(timeout=30)
    assert results == [True]


def test_a_reason_may_hold_newlines_but_not_nul(app: stalwart.Stalwart) -> None:
    @app.workflow(name="agent")
    def agent() -> bool:
        decision = stalwart.request_approval("ship it")
        return decision is not None and decision.approved

    app.start(agent, workflow_id="a")
    with pytest.raises(stalwart.InvalidOperation):
        app.approve("a", reason="first line\nsecond")  # not waiting yet: refused for that
    with pytest.raises(stalwart.UsageError, match=r"approve\(reason='bad\\x00'\): holds"):
        app.approve("a", reason="bad\x00")
