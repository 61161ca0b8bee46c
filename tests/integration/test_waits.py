"""Durable waits on every backend: timers, events, approvals, cancellation and deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart import testing


@pytest.fixture
def app(store_url: str) -> Iterator[stalwart.Stalwart]:
    """Waits need time to pass, so these tests use the real clock."""
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def later(seconds: float, action: Callable[[], Any]) -> threading.Thread:
    """Play the operator from another thread after ``seconds``."""

    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def lifecycle(app: stalwart.Stalwart, wid: str) -> list[str]:
    return [e.name for e in app.journal(wid) if e.kind == "run"]


def test_a_durable_sleep_suspends_and_resumes(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step
    def before() -> None:
        calls["before"] += 1

    @app.workflow
    def nap() -> str:
        before()
        stalwart.sleep(dt.timedelta(milliseconds=200))
        return "rested"

    started = time.monotonic()
    assert app.run(nap, workflow_id="s1") == "rested"
    assert time.monotonic() - started >= 0.2
    assert calls["before"] == 1
    assert lifecycle(app, "s1") == ["started", "suspended", "resumed", "finished"]
    sleeps = [(e.kind, e.status) for e in app.journal("s1") if e.kind == "sleep"]
    assert sleeps == [("sleep", "scheduled"), ("sleep", "completed")]


def test_events_sent_before_the_wait_are_kept_and_repeats_dropped(app: stalwart.Stalwart) -> None:
    @app.workflow
    def inbox() -> list[Any]:
        stalwart.sleep(0.1)
        return [stalwart.wait_for_event("msg"), stalwart.wait_for_event("msg")]

    app.start(inbox, workflow_id="e1")
    app.send_event("e1", "msg", {"n": 1}, dedup_key="a")
    app.send_event("e1", "msg", {"n": 1}, dedup_key="a")  # a webhook delivered twice
    app.send_event("e1", "msg", {"n": 2}, dedup_key="b")
    assert app.run(inbox, workflow_id="e1") == [{"n": 1}, {"n": 2}]
    sent = [e for e in app.journal("e1") if e.kind == "operator" and e.name == "send-event"]
    assert len(sent) == 2 and all(e.by for e in sent)


def test_an_event_wakes_a_waiting_run(app: stalwart.Stalwart) -> None:
    @app.workflow
    def webhook() -> Any:
        return stalwart.wait_for_event("paid", timeout=30)

    later(0.2, lambda: app.send_event("e2", "paid", {"invoice": 7}, by="stripe"))
    assert app.run(webhook, workflow_id="e2") == {"invoice": 7}
    entry = next(e for e in app.journal("e2") if e.kind == "operator")
    assert entry.by == "stripe" and entry.input == {"name": "paid", "dedup_key": None}


def test_a_timeout_returns_none_and_replay_keeps_the_branch(app: stalwart.Stalwart) -> None:
    stop = {"on": True}

    @app.step
    def halt() -> None:
        if stop["on"]:
            raise KeyboardInterrupt

    @app.workflow
    def race() -> Any:
        got = stalwart.wait_for_event("x", timeout=0.1)
        halt()
        return got

    with pytest.raises(KeyboardInterrupt):
        app.run(race, workflow_id="t1")
    app.send_event("t1", "x", "too late")  # the timer already won and was recorded
    stop["on"] = False
    assert app.run(race, workflow_id="t1") is None
    waits = [(e.status, e.output) for e in app.journal("t1") if e.kind == "event"]
    assert waits == [("scheduled", None), ("completed", None)]


def test_unknown_runs_and_bad_event_names(app: stalwart.Stalwart) -> None:
    with pytest.raises(stalwart.WorkflowNotFound):
        app.send_event("nope", "x")

    @app.workflow
    def wf() -> None:
        stalwart.wait_for_event("")

    with pytest.raises(stalwart.WorkflowFailed, match="non-empty"):
        app.run(wf)


def test_approvals_record_who_decided_and_why(app: stalwart.Stalwart) -> None:
    @app.workflow
    def refund(amount: int) -> Any:
        decision = stalwart.request_approval(f"refund {amount}", details={"amount": amount})
        assert decision is not None
        return [
            decision.approved,
            decision.by,
            decision.reason,
            decision.decided_at.tzinfo is not None,
        ]

    def approve() -> None:
        pending = app.approvals()
        assert [(r.workflow_id, r.subject, r.details) for r in pending] == [
            ("a1", "refund 50", {"amount": 50})
        ]
        app.approve("a1", by="maria", reason="loyal customer")

    later(0.2, approve)
    assert app.run(refund, 50, workflow_id="a1") == [True, "maria", "loyal customer", True]
    assert app.approvals() == []
    decided = app.approvals(pending=False)[0]
    assert decided.decision is not None and decided.decision.by == "maria"
    with pytest.raises(ValueError, match="no pending approval"):
        app.approve("a1")
    with pytest.raises(ValueError, match="already decided"):
        app.reject("a1", approval_id=decided.approval_id)
    ops = [(e.name, e.by) for e in app.journal("a1") if e.kind == "operator"]
    assert ops == [("approve", "maria")]


def test_a_rejection_and_a_decision_before_the_run_resumes(app: stalwart.Stalwart) -> None:
    @app.workflow
    def gate() -> Any:
        decision = stalwart.request_approval("deploy")
        return decision and (decision.approved, decision.by)

    app.start(gate, workflow_id="a2")
    with pytest.raises(TimeoutError):
        app.handle("a2").result(timeout=0.05)  # nobody executes it yet

    later(0.15, lambda: app.reject("a2", by="ops", reason="freeze"))
    assert app.run(gate, workflow_id="a2") == (False, "ops")


def test_an_approval_that_times_out(app: stalwart.Stalwart) -> None:
    @app.workflow
    def gate() -> Any:
        return stalwart.request_approval("deploy", timeout=0.1)

    assert app.run(gate, workflow_id="a3") is None
    assert app.approvals() == []  # expired, no longer pending


def test_async_twins(app: stalwart.Stalwart) -> None:
    @app.step
    async def fetch() -> int:
        await asyncio.sleep(0)
        return 1

    @app.workflow
    async def agent() -> list[Any]:
        first = await fetch()
        await stalwart.sleep_async(0.05)
        event = await stalwart.wait_for_event_async("go", timeout=5)
        decision = await stalwart.request_approval_async("ok?", timeout=0.05)
        return [first, event, decision]

    later(0.2, lambda: app.send_event("as1", "go", "went"))
    assert app.run(agent, workflow_id="as1") == [1, "went", None]

    @app.workflow
    async def wrong() -> None:
        stalwart.sleep(1)

    with pytest.raises(stalwart.WorkflowFailed, match="sleep_async"):
        app.run(wrong)


def test_waits_belong_in_workflow_code(app: stalwart.Stalwart) -> None:
    @app.step
    def step_that_waits() -> None:
        stalwart.sleep(1)

    @app.workflow
    def wf() -> str:
        try:
            step_that_waits()
        except stalwart.StepFailed as exc:
            return exc.cause_message
        return "no"

    assert "waits belong in workflow code" in app.run(wf)
    with pytest.raises(RuntimeError, match="inside a workflow"):
        stalwart.wait_for_event("x")


def test_cancel_a_waiting_run_at_once(app: stalwart.Stalwart) -> None:
    @app.workflow
    def waiter() -> None:
        stalwart.wait_for_event("never")

    later(0.2, lambda: app.cancel("c1", by="oncall"))
    with pytest.raises(stalwart.WorkflowCancelled):
        app.run(waiter, workflow_id="c1")
    assert app.handle("c1").status() == "cancelled"
    with pytest.raises(stalwart.WorkflowCancelled):
        app.handle("c1").result()
    ops = [(e.name, e.by) for e in app.journal("c1") if e.kind == "operator"]
    assert ops == [("cancel", "oncall")]


def test_cancel_a_running_run_at_its_next_step_boundary(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step
    def slow() -> None:
        calls["slow"] += 1
        time.sleep(0.6)

    @app.step
    def after() -> None:
        calls["after"] += 1

    @app.workflow
    def wf() -> None:
        slow()
        after()

    app.start(wf, workflow_id="c2")
    later(0.2, lambda: app.handle("c2").cancel())
    with pytest.raises(stalwart.WorkflowCancelled):
        app.run(wf, workflow_id="c2")
    assert calls == Counter({"slow": 1})
    assert app.journal("c2")[-1].name == "finished"


def test_a_cancel_seen_by_heartbeat_journals_the_attempt_and_announces_no_retry(
    app: stalwart.Stalwart, caplog: pytest.LogCaptureFixture
) -> None:
    @app.step(retry=stalwart.Retry(max_attempts=3, initial_delay=0.01))
    def long() -> None:
        for _ in range(200):
            stalwart.heartbeat()
            time.sleep(0.01)

    @app.workflow
    def wf() -> None:
        long()

    app.start(wf, workflow_id="c-hb")
    later(0.2, lambda: app.handle("c-hb").cancel())
    with caplog.at_level("INFO", logger="stalwart"), pytest.raises(stalwart.WorkflowCancelled):
        app.run(wf, workflow_id="c-hb")
    (attempt,) = [e for e in app.journal("c-hb") if e.kind == "step"]
    assert attempt.status == "failed" and attempt.error.startswith("WorkflowCancelled")
    assert attempt.started_at < attempt.finished_at  # the attempt's time is kept
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "next attempt" in m or "no attempt is left" in m]
    assert any("attempt 1 stopped: the run was cancelled" in m for m in messages)
    assert app.journal("c-hb")[-1].name == "finished"


def test_a_workflow_deadline_cancels_a_sleeping_run(app: stalwart.Stalwart) -> None:
    @app.workflow(timeout=0.2)
    def slow() -> None:
        stalwart.sleep(60)

    started = time.monotonic()
    with pytest.raises(stalwart.WorkflowCancelled):
        app.run(slow, workflow_id="d1")
    assert time.monotonic() - started < 5
    assert app.handle("d1").status() == "cancelled"


def test_a_worker_executes_started_runs(tmp_path: Path) -> None:

    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'w.db'}") as app:

        @app.step
        def double(x: int) -> int:
            return 2 * x

        @app.workflow
        def job(x: int) -> int:
            y = double(x)
            stalwart.sleep(0.05)
            return y + (stalwart.wait_for_event("bonus", timeout=5) or 0)

        worker = testing.worker(app, concurrency=3)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        handles = [app.start(job, i, workflow_id=f"j{i}") for i in range(12)]
        for i in range(12):
            app.send_event(f"j{i}", "bonus", 1000)
        assert [h.result(timeout=20) for h in handles] == [2 * i + 1000 for i in range(12)]
        assert asyncio.run(handles[0].result_async(timeout=1)) == 1000
        worker.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_code_that_swallows_a_wait_cannot_go_on(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step
    def after() -> None:
        calls["after"] += 1

    @app.workflow
    def careless() -> str:
        with contextlib.suppress(BaseException):  # wrong, but it must not skip the wait
            stalwart.wait_for_event("go")
        after()
        return "done"

    later(0.2, lambda: app.send_event("sw", "go"))
    assert app.run(careless, workflow_id="sw") == "done"
    assert calls["after"] == 1
    assert "suspended" in lifecycle(app, "sw")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_suspended_run_leaves_nothing_to_the_cycle_collector(
    app: stalwart.Stalwart, is_async: bool
) -> None:
    """A run that suspends is freed as its invocation ends: its signal's traceback held the
    run's frames, which hold the invocation that holds the signal (a cycle per suspended run,
    with all it refers to, that waited for a full collection and raised the worker's memory
    high-water mark)."""
    if is_async:

        @app.workflow(name="parked")
        async def parked() -> Any:
            return await stalwart.wait_for_event_async("go")

    else:

        @app.workflow(name="parked")  # type: ignore[no-redef]
        def parked() -> Any:
            return stalwart.wait_for_event("go")

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept for a look
    try:
        worker = testing.worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            for i in range(4):
                app.start(parked, workflow_id=f"p{i}")
            deadline = time.monotonic() + 30
            while len(app.list_workflows(status="suspended")) < 4:
                assert time.monotonic() < deadline, "the runs never suspended"
                time.sleep(0.02)
        finally:
            worker.stop()
            thread.join(30)
        gc.collect()
        cycles = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cycles["Suspend"] == cycles["Invocation"] == 0, cycles.most_common(10)
