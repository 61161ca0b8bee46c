"""Messages between runs on every backend: ``stalwart.send_event`` from workflow code is
delivered once however often the sender replays, an unknown target is recorded and raised
again on replay; a parent cancels one child (its compensations run); a detached child
outlives its parent's cancel, deadline and retry."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import stalwart
from stalwart import testing

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def real_app(store_url: str) -> Any:
    """An app with the real clock: its runs' short sleeps pass by themselves."""
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def deliveries(app: stalwart.Stalwart, workflow_id: str) -> list[Any]:
    """The events run ``workflow_id`` was sent, as its journal records them."""
    return [e for e in app.journal(workflow_id) if e.kind == "operator" and e.name == "send-event"]


def run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(fn())
        except Exception as exc:  # the test reads it
            outcome.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def waiting_for(app: stalwart.Stalwart, workflow_id: str) -> str | None:
    try:
        return app.describe(workflow_id).waiting_for
    except stalwart.WorkflowNotFound:
        return None


def test_a_sender_that_replays_delivers_each_send_once(real_app: stalwart.Stalwart) -> None:
    app = real_app

    @app.workflow()
    def inbox(n: int) -> list[Any]:
        return [stalwart.wait_for_event("note") for _ in range(n)]

    @app.workflow()
    def sender(target: str) -> list[bool]:
        first = stalwart.send_event(target, "note", {"n": 1})
        stalwart.sleep(0.05)  # the run suspends here: what follows runs in a replay
        second = stalwart.send_event(target, "note", {"n": 2})
        stalwart.sleep(0.05)
        again = stalwart.send_event(target, "note", {"n": 3}, dedup_key="once")
        repeat = stalwart.send_event(target, "note", {"n": 4}, dedup_key="once")
        return [first, second, again, repeat]

    app.start(inbox, 3, workflow_id="inbox")
    assert app.run(sender, "inbox", workflow_id="s") == [True, True, True, False]
    assert app.run(sender, "inbox", workflow_id="s") == [True, True, True, False]
    assert app.run(inbox, 3, workflow_id="inbox") == [{"n": 1}, {"n": 2}, {"n": 3}]
    sent = deliveries(app, "inbox")
    assert [e.by for e in sent] == ["s", "s", "s"]
    resumed = [e for e in app.journal("s") if e.kind == "run" and e.name == "resumed"]
    assert len(resumed) == 2  # it replayed twice, past the first send each time
    sends = [e for e in app.journal("s") if e.kind == "send"]
    assert [(e.name, e.status, e.output) for e in sends] == [
        ("note", "completed", True),
        ("note", "completed", True),
        ("note", "completed", True),
        ("note", "completed", False),
    ]
    # the default dedup key is the sender's id and the send's position
    assert [e.input["dedup_key"] for e in sends] == ["s/0", "s/2", "once", "once"]
    assert {e.input["workflow_id"] for e in sends} == {"inbox"}


def test_an_unknown_target_is_recorded_and_raised_again_on_replay(app: stalwart.Stalwart) -> None:
    @app.workflow()
    def ghost() -> str:
        return "boo"

    @app.workflow()
    def sender() -> list[str]:
        caught = []
        try:
            stalwart.send_event("ghost", "hello")
        except stalwart.WorkflowNotFound as exc:
            caught.append(str(exc))
        try:
            stalwart.send_event("done", "hello")
        except stalwart.InvalidOperation as exc:
            caught.append(str(exc))
        stalwart.wait_for_event("go")  # replayed from here on: the failures are raised again
        return caught

    app.run(ghost, workflow_id="done")
    thread, outcome = run_in_thread(lambda: app.run(sender, workflow_id="s"))
    try:
        wait_until(lambda: waiting_for(app, "s") == "event go", "the sender waits")
        # a dry replay answers the recorded sends from the journal, failures included
        assert app.check(["s"]) == [stalwart.CheckResult("s", True)]
        app.start(ghost, workflow_id="ghost")  # the target exists now, after the send
        app.send_event("s", "go")
    finally:
        thread.join(30)
    assert outcome and not isinstance(outcome[0], Exception), outcome
    assert outcome[0][0] == "no run with workflow_id 'ghost'"
    assert "completed: it will never read event 'hello'" in outcome[0][1]
    failed = [e for e in app.journal("s") if e.kind == "send"]
    assert [(e.status, e.error.split(":")[0] if e.error else None) for e in failed] == [
        ("failed", "WorkflowNotFound"),
        ("failed", "InvalidOperation"),
    ]
    assert any(e.kind == "run" and e.name == "resumed" for e in app.journal("s"))
    assert deliveries(app, "ghost") == []


def test_an_uncaught_unknown_target_fails_the_run_and_its_replay_fails_the_same(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow()
    def sender() -> bool:
        return stalwart.send_event("nobody", "hello")

    with pytest.raises(stalwart.WorkflowFailed) as failed:
        app.run(sender, workflow_id="s")
    assert failed.value.cause_type == "WorkflowNotFound"
    with pytest.raises(stalwart.WorkflowFailed, match="nobody"):
        app.run(sender, workflow_id="s")  # the recorded outcome, nothing sent again
    app.retry("s")
    with pytest.raises(stalwart.WorkflowFailed, match="nobody"):
        app.run(sender, workflow_id="s")  # a retry replays the recorded failure

    @app.workflow()
    def nobody() -> Any:
        return stalwart.wait_for_event("hello")

    app.start(nobody, workflow_id="nobody")
    [send] = [e for e in app.journal("s") if e.kind == "send"]
    fork = app.fork("s", from_seq=send.seq, new_id="s2")  # sends again, under the fork's id
    assert app.run(sender, workflow_id=fork.workflow_id) is True
    assert [e.by for e in deliveries(app, "nobody")] == ["s2"]


def test_send_event_in_a_step_is_a_plain_delivery_and_outside_a_run_is_refused(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow()
    def inbox() -> Any:
        return stalwart.wait_for_event("note")

    @app.step()
    def notify(target: str) -> bool:
        return stalwart.send_event(target, "note", "from a step", dedup_key="k")

    @app.workflow()
    def sender(target: str) -> list[bool]:
        return [notify(target), notify(target)]

    app.start(inbox, workflow_id="inbox")
    assert app.run(sender, "inbox", workflow_id="s") == [True, False]
    assert app.run(inbox, workflow_id="inbox") == "from a step"
    assert [e.by for e in deliveries(app, "inbox")] == ["s"]
    assert not [e for e in app.journal("s") if e.kind == "send"]
    with pytest.raises(RuntimeError, match=r"use app\.send_event"):
        stalwart.send_event("inbox", "note")
    with pytest.raises(stalwart.UsageError, match="workflow_id"):
        stalwart.send_event("", "note")
    with pytest.raises(stalwart.UsageError, match="dedup_key"):
        stalwart.send_event("inbox", "note", dedup_key="")


def test_a_parent_cancels_one_child_whose_compensations_run(app: stalwart.Stalwart) -> None:
    undone: list[str] = []

    @app.step(compensate=lambda result, item: undone.append(f"release {result}"))
    def reserve(item: str) -> str:
        return f"{item}-1"

    @app.workflow(name="worker")
    def worker(parent: str, item: str) -> str:
        reserve(item)
        stalwart.send_event(parent, "ready", item)
        return str(stalwart.wait_for_event("never"))

    @app.workflow()
    def boss() -> list[str]:
        me = stalwart.workflow_id()
        doomed = stalwart.start_child(worker, me, "a")
        kept = stalwart.start_child(worker, me, "b")
        stalwart.wait_for_event("ready")
        stalwart.wait_for_event("ready")
        doomed.cancel()
        doomed.cancel()  # a second cancel of the same child does nothing more
        try:
            doomed.result()
        except stalwart.WorkflowCancelled as exc:
            outcome = f"cancelled: {exc}"
        stalwart.send_event(kept.workflow_id, "never", "go on")
        return [outcome, kept.result()]

    result = app.run(boss, workflow_id="b")
    assert result[0].startswith("cancelled: child run 'b/0' was cancelled")
    assert result[1] == "go on"
    assert undone == ["release a-1"]
    assert app.handle("b/0").status() == "cancelled"
    assert app.handle("b/1").status() == "completed"
    cancels = [e for e in app.journal("b") if e.kind == "child" and e.name.startswith("cancel")]
    assert [e.name for e in cancels] == ["cancel worker", "cancel worker"]
    note = next(e for e in app.journal("b/0") if e.kind == "operator" and e.name == "cancel")
    assert note.by == "parent b"


def _detached_family(app: stalwart.Stalwart, *, timeout: float | None = None) -> dict[str, Any]:
    @app.workflow()
    def lingering() -> Any:
        return stalwart.wait_for_event("go")

    @app.workflow(timeout=timeout)
    def family(fail: bool) -> list[str]:
        attached = stalwart.start_child(lingering)
        detached = stalwart.start_child(lingering, detached=True)
        if fail:
            raise stalwart.NonRetryableError("the parent gives up")
        return [str(attached.result()), str(detached.result())]

    return {"lingering": lingering, "family": family}


def test_a_detached_child_outlives_its_parents_failure_and_retry(app: stalwart.Stalwart) -> None:
    wf = _detached_family(app)
    with pytest.raises(stalwart.WorkflowFailed):
        app.run(wf["family"], True, workflow_id="p")
    assert app.handle("p/0").status() == "cancelled"  # cancelled with its parent
    assert app.handle("p/1").status() == "pending"  # detached: left to run
    kids = {c.workflow_id: c.parent_id for c in app.list_workflows(parent_id="p")}
    assert kids == {"p/0": "p", "p/1": "p"}  # parent_id still recorded
    app.send_event("p/1", "go", "detached")
    assert app.run(wf["lingering"], workflow_id="p/1") == "detached"
    app.retry("p")
    assert app.handle("p/0").status() == "pending"  # the attached child is retried
    assert app.handle("p/1").status() == "completed"  # the detached one is not touched
    assert not [e for e in app.journal("p/1") if e.kind == "operator" and e.name == "retry"]


def test_a_detached_child_outlives_its_parents_cancel(app: stalwart.Stalwart) -> None:
    wf = _detached_family(app)
    thread, outcome = run_in_thread(lambda: app.run(wf["family"], False, workflow_id="c"))
    try:
        wait_until(lambda: waiting_for(app, "c") == "child c/0", "the parent waits")
        wait_until(lambda: waiting_for(app, "c/1") == "event go", "the detached child waits")
        app.cancel("c", by="ops")
    finally:
        thread.join(30)
    assert isinstance(outcome[0], stalwart.WorkflowCancelled)
    assert app.handle("c/0").status() == "cancelled"
    assert app.handle("c/1").status() == "suspended"
    app.send_event("c/1", "go", 1)
    assert app.run(wf["lingering"], workflow_id="c/1") == 1


def test_a_detached_child_is_not_covered_by_its_parents_deadline(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:  # a real clock: the deadline passes by itself
        wf = _detached_family(app, timeout=0.3)
        with pytest.raises(stalwart.WorkflowCancelled):
            app.run(wf["family"], False, workflow_id="t")
        store = testing.store_of(app)
        assert app.handle("t/0").status() == "cancelled"
        assert store.get_run("t/0").deadline == store.get_run("t").deadline
        assert store.get_run("t/1").deadline is None
        assert app.handle("t/1").status() in ("pending", "suspended")


def test_async_workflows_send_concurrently_and_a_fork_resends_only_after_from_seq(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow()
    def inbox(n: int) -> list[Any]:
        return sorted(stalwart.wait_for_event("note") for _ in range(n))

    @app.workflow()
    async def broadcaster(target: str) -> list[bool]:
        async def one(i: int) -> bool:
            return stalwart.send_event(target, "note", i)

        return list(await asyncio.gather(one(0), one(1), one(2)))

    app.start(inbox, 4, workflow_id="inbox")
    assert app.run(broadcaster, "inbox", workflow_id="b") == [True, True, True]
    keys = sorted(e.input["dedup_key"] for e in app.journal("b") if e.kind == "send")
    assert keys == ["b/t0.0", "b/t1.0", "b/t2.0"]  # one position per task, stable on replay
    third = max(e.seq for e in app.journal("b") if e.kind == "send")
    fork = app.fork("b", from_seq=third, new_id="bf")
    assert app.run(broadcaster, "inbox", workflow_id=fork.workflow_id) == [True, True, True]
    resent = [e.input["dedup_key"] for e in app.journal("bf") if e.kind == "send"]
    assert len(resent) == 3 and sum(key.startswith("bf/") for key in resent) == 1
    assert app.run(inbox, 4, workflow_id="inbox") == [0, 1, 2, 2]  # the fork's one resend
    assert len(deliveries(app, "inbox")) == 4
