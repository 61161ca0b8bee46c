"""The engine on every backend: journaling, replay, determinism and the step context."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import gc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart.testing import FakeClock


@dataclasses.dataclass
class Quote:
    amount: int
    when: dt.datetime


class Interrupt(KeyboardInterrupt):
    """Stops an in-process run mid-way, as Ctrl-C would (crashes are tested in faults/)."""


def _interrupting(app: stalwart.Stalwart, stop: dict[str, bool]) -> Any:
    """A step that stands in for a crash (``Interrupt``) while ``stop["on"]``."""

    @app.step
    def finish() -> None:
        if stop["on"]:
            raise Interrupt

    return finish


class Crash(BaseException):
    """Stands in for kill -9 (as in docs/replay.md)."""


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_steps_are_journaled_and_results_round_trip(app: stalwart.Stalwart) -> None:
    @app.step
    def fetch(n: int) -> dict[str, Any]:
        return {"n": n, "at": dt.date(2026, 1, n), "tags": ("a", "b")}

    @app.workflow
    def agent(count: int) -> list[Any]:
        return [fetch(i) for i in range(1, count + 1)]

    result = app.run(agent, 3, workflow_id="r1")
    assert result[0] == {"n": 1, "at": dt.date(2026, 1, 1), "tags": ("a", "b")}
    steps = [e for e in app.journal("r1") if e.kind == "step"]
    assert [(e.seq, e.name, e.status, e.attempt) for e in steps] == [
        (1, "test_steps_are_journaled_and_results_round_trip.<locals>.fetch", "completed", 1),
        (2, "test_steps_are_journaled_and_results_round_trip.<locals>.fetch", "completed", 1),
        (3, "test_steps_are_journaled_and_results_round_trip.<locals>.fetch", "completed", 1),
    ]
    assert steps[1].input == {"args": [2], "kwargs": {}}
    assert steps[1].output["n"] == 2
    assert all(e.started_at and e.finished_at for e in steps)
    kinds = [(e.kind, e.name) for e in app.journal("r1") if e.kind == "run"]
    assert kinds == [("run", "started"), ("run", "finished")]
    assert app.handle("r1").status() == "completed"


def test_a_terminal_run_is_not_executed_again(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step
    def work() -> str:
        calls["work"] += 1
        return "done"

    @app.workflow
    def wf() -> str:
        return work()

    assert app.run(wf, workflow_id="once") == "done"
    assert app.run(wf, workflow_id="once") == "done"
    assert calls["work"] == 1


def test_replay_returns_recorded_results_and_reraises_recorded_errors(
    app: stalwart.Stalwart,
) -> None:
    calls = Counter[str]()
    stop = {"on": True}

    @app.step(retry=stalwart.Retry.never())
    def broken() -> None:
        calls["broken"] += 1
        raise ValueError("tool said no")

    @app.step
    def fine(x: int) -> int:
        calls["fine"] += 1
        return x * 2

    @app.step
    def last() -> str:
        calls["last"] += 1
        if stop["on"]:
            raise Interrupt
        return "end"

    @app.workflow
    def wf() -> list[Any]:
        out: list[Any] = [fine(21)]
        try:
            broken()
        except stalwart.StepFailed as exc:
            out.append(
                (exc.step.rsplit(".", 1)[-1], exc.attempts, exc.cause_type, exc.cause_message)
            )
        out.append(last())
        return out

    with pytest.raises(Interrupt):
        app.run(wf, workflow_id="rr")
    stop["on"] = False
    result = app.run(wf, workflow_id="rr")
    assert result == [42, ("broken", 1, "ValueError", "tool said no"), "end"]
    assert calls == Counter({"fine": 1, "broken": 1, "last": 2})


def test_step_failed_carries_the_cause_and_fails_the_run(app: stalwart.Stalwart) -> None:
    @app.step(retry=stalwart.Retry(max_attempts=3, initial_delay=1, jitter=False), name="charge")
    def charge() -> None:
        raise ConnectionError("gateway down")

    @app.workflow
    def wf() -> None:
        charge()

    with pytest.raises(stalwart.WorkflowFailed) as info:
        app.run(wf, workflow_id="f1")
    assert info.value.cause_type == "StepFailed"
    assert "ConnectionError: gateway down" in str(info.value)
    attempts = [(e.attempt, e.status, e.error) for e in app.journal("f1") if e.kind == "step"]
    assert attempts == [(n, "failed", "ConnectionError: gateway down") for n in (1, 2, 3)]
    infos = app.list_workflows(status="failed")
    assert [i.workflow_id for i in infos] == ["f1"]
    assert infos[0].error is not None and "ConnectionError: gateway down" in infos[0].error
    with pytest.raises(stalwart.WorkflowFailed):
        app.handle("f1").result()


def test_retries_back_off_on_the_injected_clock(app: stalwart.Stalwart, clock: FakeClock) -> None:
    attempts: list[int] = []
    keys: set[str] = set()

    @app.step(retry=stalwart.Retry(max_attempts=4, initial_delay=1, backoff=2, jitter=False))
    def flaky() -> int:
        attempts.append(stalwart.attempt())
        keys.add(stalwart.idempotency_key())
        if len(attempts) < 4:
            raise TimeoutError("slow provider")
        return len(attempts)

    @app.workflow
    def wf() -> int:
        return flaky()

    assert app.run(wf, workflow_id="b1") == 4
    assert attempts == [1, 2, 3, 4]
    assert clock.slept == [1.0, 2.0, 4.0]
    assert len(keys) == 1 and next(iter(keys)).startswith("b1/")


def test_non_retryable_errors_stop_at_once(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step(retry=stalwart.Retry(max_attempts=5, non_retryable=(PermissionError,)))
    def denied() -> None:
        calls["denied"] += 1
        raise PermissionError("no")

    @app.step(retry=stalwart.Retry(max_attempts=5))
    def refused() -> None:
        calls["refused"] += 1
        raise stalwart.NonRetryableError("invalid card")

    @app.workflow
    def wf() -> list[int]:
        out = []
        for step in (denied, refused):
            try:
                step()
            except stalwart.StepFailed as exc:
                out.append(exc.attempts)
        return out

    assert app.run(wf) == [1, 1]
    assert calls == Counter({"denied": 1, "refused": 1})


def test_sync_step_timeout_abandons_and_retries(app: stalwart.Stalwart) -> None:
    import time

    @app.step(timeout=0.05, retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def slow() -> str:
        if stalwart.attempt() == 1:
            time.sleep(0.5)
            return "late"
        return "fast"

    @app.workflow
    def wf() -> str:
        return slow()

    assert app.run(wf, workflow_id="t1") == "fast"
    errors = [e.error for e in app.journal("t1") if e.kind == "step" and e.status == "failed"]
    assert len(errors) == 1 and errors[0] is not None and errors[0].startswith("StepTimeout")


def test_async_step_timeout_cancels(app: stalwart.Stalwart) -> None:
    cancelled = []

    @app.step(timeout=0.05, retry=stalwart.Retry.never())
    async def hang() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    @app.workflow
    async def wf() -> str:
        try:
            await hang()
        except stalwart.StepFailed as exc:
            return exc.cause_type
        return "no"

    assert app.run(wf) == "StepTimeout"
    assert cancelled == [True]


def test_now_uuid_random_are_recorded_once(app: stalwart.Stalwart, clock: FakeClock) -> None:
    seen: list[tuple[Any, ...]] = []
    stop = {"on": True}

    @app.step
    def boom() -> None:
        if stop["on"]:
            raise Interrupt

    @app.workflow
    def wf() -> tuple[Any, ...]:
        values = (stalwart.now(), stalwart.uuid4(), stalwart.random())
        seen.append(values)
        boom()
        return values

    with pytest.raises(Interrupt):
        app.run(wf, workflow_id="v1")
    clock.advance(3600)
    stop["on"] = False
    result = app.run(wf, workflow_id="v1")
    assert seen[0] == seen[1] == result
    assert result[0].tzinfo is not None and result[0] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert isinstance(result[1], stalwart.uuid4().__class__)
    assert 0.0 <= result[2] < 1.0


def test_context_calls_outside_workflows() -> None:
    assert stalwart.now().tzinfo is not None
    assert stalwart.uuid4() != stalwart.uuid4()
    with pytest.raises(RuntimeError, match="inside a step"):
        stalwart.idempotency_key()
    with pytest.raises(RuntimeError, match="inside a workflow"):
        stalwart.workflow_id()


def test_steps_outside_workflows_and_inside_steps_are_plain_calls(app: stalwart.Stalwart) -> None:
    @app.step
    def inner(x: int) -> int:
        return x + 1

    @app.step
    def outer(x: int) -> int:
        return inner(x) * 10

    @app.workflow
    def wf() -> int:
        return outer(1)

    assert inner(1) == 2
    assert app.run(wf, workflow_id="p1") == 20
    assert [e.name.rsplit(".", 1)[-1] for e in app.journal("p1") if e.kind == "step"] == ["outer"]


def test_heartbeat_records_progress_and_workflow_id(
    app: stalwart.Stalwart, raw_sql: Callable[..., list[Any]]
) -> None:
    @app.step
    def long() -> str:
        stalwart.heartbeat({"done": 1})
        return stalwart.workflow_id()

    @app.workflow
    def wf() -> str:
        return long()

    assert app.run(wf, workflow_id="hb") == "hb"
    progress = raw_sql(app, "SELECT progress FROM runs WHERE workflow_id = 'hb'")[0][0]
    assert progress is not None


class _Monotonic:
    """``time`` for ``stalwart._context``: a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize("late", [False, True], ids=["prompt", "late"])
def test_a_heartbeat_whose_answer_came_late_writes_again_before_the_step_goes_on(
    app: stalwart.Stalwart, monkeypatch: pytest.MonkeyPatch, late: bool
) -> None:
    """An answer that took a third of the lease may be stale (the worker paused while it was on
    the way, the run taken over meanwhile): the heartbeat asks again before the step acts."""
    from stalwart import _context
    from stalwart.testing import store_of

    clock = _Monotonic()
    monkeypatch.setattr(_context, "time", clock)
    store = store_of(app)
    real = store.record_progress
    answers: list[bool] = []

    def record_progress(workflow_id: str, **kwargs: Any) -> bool:
        ok = real(workflow_id, **kwargs)
        if late and not answers:
            clock.now += app._runtime.lease_seconds  # paused past the lease, its answer waiting
        answers.append(ok)
        return ok

    monkeypatch.setattr(store, "record_progress", record_progress)

    @app.step
    def pay() -> str:
        stalwart.heartbeat({"paying": True})
        return "paid"

    @app.workflow
    def wf() -> str:
        return pay()

    assert app.run(wf, workflow_id="beat") == "paid"
    assert answers == ([True, True] if late else [True])


def test_output_validation_retries_malformed_results(app: stalwart.Stalwart) -> None:
    import pydantic

    class Plan(pydantic.BaseModel):
        steps: list[str]

    replies = iter(['{"steps": "not a list"}', '{"steps": ["search", "answer"]}'])

    @app.step(output=Plan, retry=stalwart.Retry(max_attempts=3, initial_delay=0))
    def ask_llm() -> Any:
        import json

        return json.loads(next(replies))

    @app.step(
        output=lambda v: v if v > 0 else (_ for _ in ()).throw(ValueError("<= 0")),
        retry=stalwart.Retry.never(),
    )
    def positive(v: int) -> int:
        return v

    @app.workflow
    def wf() -> list[Any]:
        plan = ask_llm()
        assert isinstance(plan, Plan)  # restored from output=
        try:
            positive(-1)
        except stalwart.StepFailed as exc:
            return [plan, exc.cause_type]
        return [plan]

    plan, cause = app.run(wf, workflow_id="o1")
    assert plan == {"steps": ["search", "answer"]}  # the workflow result names no model
    assert cause == "OutputInvalid"
    failed = [e.error for e in app.journal("o1") if e.status == "failed"]
    assert failed[0] is not None and failed[0].startswith("OutputInvalid")


def test_dataclass_results_are_restored_from_the_return_annotation(app: stalwart.Stalwart) -> None:
    @app.step
    def quote() -> Quote:
        return Quote(5, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))

    @app.workflow
    def wf() -> int:
        q = quote()
        assert isinstance(q, Quote)
        return q.amount

    assert app.run(wf) == 5


def test_async_gather_positions_do_not_depend_on_completion_order(app: stalwart.Stalwart) -> None:
    delays = {"a": 0.03, "b": 0.0, "a2": 0.0, "b2": 0.02}
    calls = Counter[str]()
    stop = {"on": True}

    @app.step
    async def tool(name: str) -> str:
        calls[name] += 1
        await asyncio.sleep(delays[name])
        return name.upper()

    finish = _interrupting(app, stop)

    @app.workflow
    async def wf() -> list[str]:
        async def branch(first: str) -> str:
            head = await tool(first)
            return head + await tool(first + "2")

        results = await asyncio.gather(branch("a"), branch("b"))
        finish()
        return list(results)

    with pytest.raises(Interrupt):
        app.run(wf, workflow_id="g1")
    first = {e.seq: e.input for e in app.journal("g1") if e.kind == "step"}
    delays.update({"a": 0.0, "b": 0.03, "a2": 0.02, "b2": 0.0})  # the other order this time
    stop["on"] = False
    assert app.run(wf, workflow_id="g1") == ["AA2", "BB2"]
    assert calls == Counter({"a": 1, "b": 1, "a2": 1, "b2": 1})
    again = {e.seq: e.input for e in app.journal("g1") if e.kind == "step" and e.seq in first}
    assert again == first


class _UnclosedClient:
    """Garbage like an SDK's HTTP client left unclosed (openai's closes itself from
    ``__del__`` with ``loop.create_task(self.aclose())``), in a cycle only the collector frees."""

    def __init__(self) -> None:
        self.cycle = self
        self.workflow_ids: list[str] = []  # what the closing task found itself in

    async def aclose(self) -> None:
        with contextlib.suppress(RuntimeError):  # outside a run
            self.workflow_ids.append(stalwart.workflow_id())

    def __del__(self) -> None:
        with contextlib.suppress(RuntimeError):  # collected outside a loop
            asyncio.get_running_loop().create_task(self.aclose())


def _leaked_openai_client(closing_ran_in: list[str]) -> None:
    """A real ``openai.AsyncOpenAI`` left unclosed, in a cycle only the collector frees: its
    HTTP client closes itself from ``__del__`` with ``loop.create_task(self.aclose())``."""
    import openai

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="test-key")
    client.cycle = client  # type: ignore[attr-defined]


def _leaked_stand_in(closing_ran_in: list[str]) -> None:
    _UnclosedClient().workflow_ids = closing_ran_in


@pytest.mark.parametrize(
    "leak", [_leaked_stand_in, _leaked_openai_client], ids=["stand-in", "openai"]
)
def test_tasks_the_garbage_collector_creates_do_not_move_the_runs_positions(
    app: stalwart.Stalwart, leak: Callable[[list[str]], None]
) -> None:
    """A collection starts wherever allocations make it start: in the first attempt it found
    garbage whose finalizers created two tasks just before the workflow created its own, in
    the second it found none. The workflow's tasks keep their places, so the step its first
    task completed is not run again and nothing the journal holds is left unvisited."""
    calls = Counter[str]()
    garbage = {"clients": 2}
    stop = {"on": True}
    closing_ran_in: list[str] = []

    @app.step
    async def ask(question: str) -> str:
        calls[question] += 1
        return question.upper()

    finish = _interrupting(app, stop)

    @app.workflow
    async def wf() -> list[str]:
        enabled = gc.isenabled()
        gc.disable()  # no other collection frees the clients first, in this thread or another
        try:
            for _ in range(garbage["clients"]):
                leak(closing_ran_in)
            gc.collect()  # here, in the run's main task
        finally:
            if enabled:
                gc.enable()
        answers = [await asyncio.create_task(ask(q)) for q in ("a", "b")]
        finish()
        return answers

    with pytest.raises(Interrupt):
        app.run(wf, workflow_id="gc1")
    garbage["clients"] = 0
    stop["on"] = False
    assert app.run(wf, workflow_id="gc1") == ["A", "B"]
    assert calls == Counter({"a": 1, "b": 1})
    assert closing_ran_in == []  # the clients' closing tasks ran outside the run


def test_run_async_from_an_event_loop(app: stalwart.Stalwart) -> None:
    @app.step
    async def hello(name: str) -> str:
        return f"hi {name}"

    @app.workflow
    async def wf(name: str) -> str:
        return await hello(name)

    async def main() -> str:
        return await app.run_async(wf, "ada", workflow_id="ra")  # type: ignore[no-any-return]

    assert asyncio.run(main()) == "hi ada"
    assert app.run(wf, "ada", workflow_id="ra") == "hi ada"


def test_sync_steps_inside_async_workflows_run_inline(app: stalwart.Stalwart) -> None:
    @app.step
    def add(a: int, b: int) -> int:
        return a + b

    @app.workflow
    async def wf() -> int:
        return add(1, 2) + add(3, 4)

    assert app.run(wf) == 10


def test_start_records_a_pending_run(app: stalwart.Stalwart) -> None:
    @app.workflow
    def wf(x: int) -> int:
        return x

    handle = app.start(wf, 1, workflow_id="s1")
    assert handle.workflow_id == "s1" and handle.status() == "pending"
    assert app.start(wf, 2, workflow_id="s1").workflow_id == "s1"
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.05)
    assert app.run(wf, 99, workflow_id="s1") == 1  # resumes the recorded run and its input
    assert handle.result(timeout=1) == 1
    assert asyncio.run(handle.result_async(timeout=1)) == 1


def test_list_workflows_pages_newest_first(app: stalwart.Stalwart, clock: FakeClock) -> None:
    @app.workflow
    def wf() -> None:
        return None

    for i in range(5):
        app.start(wf, workflow_id=f"w{i}")
        clock.advance(1)
    page = app.list_workflows(limit=2)
    assert [i.workflow_id for i in page] == ["w4", "w3"]
    page = app.list_workflows(limit=2, before=page[-1].created_at)
    assert [i.workflow_id for i in page] == ["w2", "w1"]
    assert [i.name for i in app.list_workflows(name="nope")] == []
    assert page[0].status == "pending" and page[0].queue == "default"
    with pytest.raises(ValueError, match="status"):
        app.list_workflows(status="bogus")


def test_unknown_runs(app: stalwart.Stalwart) -> None:
    with pytest.raises(stalwart.WorkflowNotFound, match="nope"):
        app.handle("nope")
    with pytest.raises(stalwart.WorkflowNotFound):
        app.journal("nope")


def test_a_long_backoff_is_a_durable_timer(app: stalwart.Stalwart, clock: FakeClock) -> None:
    import threading

    attempts: list[int] = []

    @app.step(retry=stalwart.Retry(max_attempts=2, initial_delay=600, jitter=False))
    def rate_limited() -> str:
        attempts.append(stalwart.attempt())
        if len(attempts) == 1:
            raise ConnectionError("429: retry in 10 minutes")
        return "ok"

    @app.workflow
    def wf() -> str:
        return rate_limited()

    done = threading.Event()

    def advance() -> None:  # ten minutes pass while the run is suspended, holding nothing
        while not done.wait(0.01):
            if app.handle("lb").status() == "suspended":
                clock.advance(601)
                return

    app.start(wf, workflow_id="lb")
    mover = threading.Thread(target=advance, daemon=True)
    mover.start()
    try:
        assert app.run(wf, workflow_id="lb") == "ok"
    finally:
        done.set()
    assert attempts == [1, 2]
    assert clock.slept == []  # no thread slept through the backoff
    names = [e.name for e in app.journal("lb") if e.kind == "run"]
    assert "suspended" in names


@pytest.mark.timeout(30)
def test_child_run_started_inside_a_step_journals_its_own_steps(tmp_path: Path) -> None:
    calls = Counter[str]()
    crash = True
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        def charge(order: str) -> str:
            calls["charge"] += 1
            return f"charged {order}"

        @app.step
        def ship(order: str) -> str:
            if crash:
                raise Crash()
            return f"shipped {order}"

        @app.workflow
        def fulfil(order: str) -> list[str]:
            return [charge(order), ship(order)]

        @app.step
        def spawn(order: str) -> Any:
            return app.run(fulfil, order, workflow_id=f"child-{order}")

        @app.workflow
        def parent(order: str) -> Any:
            return spawn(order)

        with pytest.raises(Crash):
            app.run(parent, "o1", workflow_id="parent-o1")
        crash = False
        assert app.run(fulfil, "o1", workflow_id="child-o1") == ["charged o1", "shipped o1"]
        # The child run is durable on its own: its completed step must not run twice.
        assert calls["charge"] == 1
        assert [e.name for e in app.journal("child-o1") if e.kind == "step"] != []


@pytest.mark.timeout(30)
def test_paging_with_before_does_not_repeat_the_boundary_row(tmp_path: Path) -> None:
    clock = FakeClock(start=1_767_225_600.0000007)  # sub-microsecond, as time.time() gives
    with stalwart.Stalwart(_url(tmp_path), clock=clock) as app:

        @app.workflow
        def wf() -> None:
            return None

        app.start(wf, workflow_id="older")
        clock.advance(1.0)
        app.start(wf, workflow_id="newer")
        first = app.list_workflows(limit=1)
        second = app.list_workflows(limit=1, before=first[-1].created_at)
        assert [r.workflow_id for r in first] == ["newer"]
        assert [r.workflow_id for r in second] == ["older"]


@pytest.mark.timeout(30)
def test_async_step_own_timeout_error_keeps_its_type(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step(timeout=30, retry=stalwart.Retry.never())
        async def call_api() -> str:
            raise TimeoutError("upstream read timed out")

        @app.workflow
        async def wf() -> str:
            try:
                return await call_api()
            except stalwart.StepFailed as exc:
                return exc.cause_type

        assert app.run(wf, workflow_id="w") == "TimeoutError"
