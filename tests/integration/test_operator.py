"""Operator actions: dead-letter redrive (retry), resolve, fork and cancel, on every backend
(a test on one SQLite file says so)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

import stalwart
from stalwart.testing import FakeClock


class Crash(BaseException):
    """Stands in for kill -9 / Ctrl-C in the middle of a step (as in docs/replay.md)."""


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_a_failed_run_is_redriven_from_its_failed_step(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()
    broken = {"on": True}

    @app.step(name="fetch")
    def fetch() -> int:
        calls["fetch"] += 1
        return 1

    @app.step(name="charge", retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def charge(x: int) -> int:
        calls["charge"] += 1
        if broken["on"]:
            raise ConnectionError("provider down")
        return x + 1

    @app.workflow(name="agent")
    def agent() -> int:
        return charge(fetch())

    with pytest.raises(stalwart.WorkflowFailed, match="provider down"):
        app.run(agent, workflow_id="r1")
    failed = app.list_workflows(status="failed")
    assert [f.workflow_id for f in failed] == ["r1"] and "ConnectionError" in (
        failed[0].error or ""
    )
    broken["on"] = False  # the cause was fixed
    app.retry("r1", by="oncall")
    assert app.handle("r1").status() == "pending"
    assert app.run(agent, workflow_id="r1") == 2
    assert calls == Counter({"fetch": 1, "charge": 3})
    attempts = [(e.attempt, e.status) for e in app.journal("r1") if e.name == "charge"]
    assert attempts == [(1, "failed"), (2, "failed"), (0, "failed"), (1, "completed")]
    ops = [(e.name, e.by) for e in app.journal("r1") if e.kind == "operator"]
    assert ops == [("retry", "oncall")]


def test_retry_refuses_runs_that_did_not_fail(app: stalwart.Stalwart) -> None:
    @app.workflow(name="ok")
    def ok() -> int:
        return 1

    app.run(ok, workflow_id="fine")
    with pytest.raises(ValueError, match="only failed and needs_attention"):
        app.retry("fine")
    with pytest.raises(stalwart.WorkflowNotFound):
        app.retry("nope")


def test_a_divergence_is_retried_after_the_fix(app: stalwart.Stalwart) -> None:
    version = {"v": 1}

    @app.step(name="a")
    def a() -> str:
        return "a"

    @app.step(name="b")
    def b() -> str:
        return "b"

    @app.step(name="halt")
    def halt() -> None:
        if version["v"] == 1:
            raise KeyboardInterrupt

    @app.workflow(name="w")
    def w() -> str:
        first = (a if version["v"] != 2 else b)()
        halt()
        return first

    with pytest.raises(KeyboardInterrupt):
        app.run(w, workflow_id="d")
    version["v"] = 2  # a bad deploy
    with pytest.raises(stalwart.NeedsAttention):
        app.run(w, workflow_id="d")
    version["v"] = 3  # the fix
    app.retry("d")
    assert app.run(w, workflow_id="d") == "a"


def test_an_irreversible_step_in_doubt_waits_for_resolve(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()
    crash = {"on": True}

    @app.step(name="charge", irreversible=True)
    def charge(order: str, amount: int) -> str:
        calls["charge"] += 1
        if crash["on"]:
            raise KeyboardInterrupt  # stands in for a crash right after the effect
        return "ch_2"

    @app.workflow(name="pay")
    def pay() -> str:
        return charge("o-1", 5)

    with pytest.raises(KeyboardInterrupt):
        app.run(pay, workflow_id="p1")
    with pytest.raises(stalwart.NeedsAttention) as info:
        app.run(pay, workflow_id="p1")
    reason = info.value.reason
    assert "'charge'" in reason and "('o-1', 5)" in reason and "p1/0" in reason
    assert calls["charge"] == 1  # never re-executed blindly
    statuses = [e.status for e in app.journal("p1") if e.name == "charge"]
    assert statuses == ["scheduled", "in_doubt"]
    with pytest.raises(ValueError, match="exactly one"):
        app.resolve("p1", 1)
    with pytest.raises(ValueError, match="retry"):
        app.retry("p1")
    app.resolve("p1", 1, result="ch_1", by="finance")
    assert app.run(pay, workflow_id="p1") == "ch_1"
    assert calls["charge"] == 1


def test_resolve_with_rerun_runs_the_step_again(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()
    crash = {"on": True}

    @app.step(name="email", irreversible=True)
    def email(to: str) -> str:
        calls["email"] += 1
        if crash["on"]:
            raise KeyboardInterrupt
        return f"sent to {to}"

    @app.workflow(name="notify")
    def notify() -> str:
        return email("ada@example.com")

    with pytest.raises(KeyboardInterrupt):
        app.run(notify, workflow_id="n1")
    with pytest.raises(stalwart.NeedsAttention):
        app.run(notify, workflow_id="n1")
    crash["on"] = False
    app.resolve("n1", 1, rerun=True)
    assert app.run(notify, workflow_id="n1") == "sent to ada@example.com"
    assert calls["email"] == 2


def test_verify_is_check_then_act(app: stalwart.Stalwart) -> None:
    charges: dict[str, str] = {}
    crash = {"on": True}

    def find_charge(order: str) -> str | None:
        return charges.get(stalwart.idempotency_key())

    @app.step(
        name="charge",
        irreversible=True,
        verify=find_charge,
        retry=stalwart.Retry(max_attempts=3, initial_delay=0),
    )
    def charge(order: str) -> str:
        charges[stalwart.idempotency_key()] = f"ch-{order}"
        if crash["on"]:
            raise KeyboardInterrupt
        return f"ch-{order}"

    @app.workflow(name="pay")
    def pay() -> str:
        return charge("o-9")

    with pytest.raises(KeyboardInterrupt):
        app.run(pay, workflow_id="v1")
    assert app.run(pay, workflow_id="v1") == "ch-o-9"
    assert len(charges) == 1
    statuses = [(e.status, e.by) for e in app.journal("v1") if e.name == "charge"]
    assert statuses == [("scheduled", None), ("in_doubt", None), ("completed", "verify")]


def test_an_exception_means_no_effect_and_verify_guards_the_retry(app: stalwart.Stalwart) -> None:
    effects: list[str] = []
    checks: list[int] = []

    def verify(x: int) -> str | None:
        checks.append(stalwart.attempt())
        return None

    @app.step(
        irreversible=True, verify=verify, retry=stalwart.Retry(max_attempts=2, initial_delay=0)
    )
    def act(x: int) -> str:
        if stalwart.attempt() == 1:
            raise ConnectionError("refused before the effect")
        effects.append("done")
        return "ok"

    @app.workflow
    def wf() -> str:
        return act(1)

    assert app.run(wf) == "ok"
    assert effects == ["done"] and checks == [2]


def test_irreversible_without_verify_has_one_attempt(app: stalwart.Stalwart) -> None:
    @app.step(irreversible=True, retry=stalwart.Retry(max_attempts=5))
    def once() -> None:
        raise ConnectionError("no")

    @app.workflow
    def wf() -> int:
        try:
            once()
        except stalwart.StepFailed as exc:
            return exc.attempts
        return 0

    assert app.run(wf) == 1
    with pytest.raises(ValueError, match="irreversible=True"):
        app.step(verify=lambda: None)


def test_a_fork_replays_the_recorded_values_and_waits_it_reuses(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step(name="write")
    def write(stamp: str, token: str) -> str:
        calls["write"] += 1
        return f"{stamp} {token}"

    @app.workflow(name="stamped")
    def stamped() -> list[str]:
        stamp = stalwart.now().isoformat()
        token = str(stalwart.uuid4())
        roll = stalwart.random()
        stalwart.sleep(0)
        return [write(stamp, token), str(roll)]

    first = app.run(stamped, workflow_id="v0")
    last = max(e.seq for e in app.journal("v0") if e.seq is not None)
    forked = app.fork("v0", last, new_id="v1")
    assert app.run(stamped, workflow_id=forked.workflow_id) == first
    assert calls["write"] == 2  # the step at from_seq runs again; what came before is reused
    kinds = {e.kind for e in app.journal("v1") if e.status == "reused"}
    assert {"now", "uuid", "random", "sleep"} <= kinds


def test_fork_reuses_the_journal_and_refuses_to_repeat_irreversible_steps(
    app: stalwart.Stalwart,
) -> None:
    calls = Counter[str]()

    @app.step(name="research")
    def research() -> str:
        calls["research"] += 1
        return "notes"

    @app.step(name="send", irreversible=True)
    def send(text: str) -> str:
        calls["send"] += 1
        return f"sent:{text}"

    @app.step(name="summarize")
    def summarize(note: str) -> str:
        calls["summarize"] += 1
        return note.upper()

    @app.workflow(name="agent")
    def agent() -> list[str]:
        n = research()
        s = send(n)
        return [n, s, summarize(n)]

    assert app.run(agent, workflow_id="f0") == ["notes", "sent:notes", "NOTES"]
    with pytest.raises(stalwart.UnsafeFork, match="'send' \\(seq 2\\)"):
        app.fork("f0", 2)
    handle = app.fork("f0", 3, new_id="f1", by="dev")
    assert handle.status() == "pending"
    assert app.run(agent, workflow_id="f1") == ["notes", "sent:notes", "NOTES"]
    assert calls == Counter({"research": 1, "send": 1, "summarize": 2})
    reused = [(e.seq, e.name, e.status) for e in app.journal("f1") if e.status == "reused"]
    assert reused == [(1, "research", "reused"), (2, "send", "reused")]
    forked = app.fork("f0", 1, new_id="f2", allow_reexecute=True)
    assert app.run(agent, workflow_id=forked.workflow_id)[1] == "sent:notes"
    assert calls["send"] == 2
    notes = [e.input for e in app.journal("f0") if e.kind == "operator"]
    assert {"new_id": "f1", "from_seq": 3} in notes
    # A fork of the fork still knows that 'send' is irreversible.
    with pytest.raises(stalwart.UnsafeFork, match="'send' \\(seq 2\\)"):
        app.fork("f1", 2)
    again = app.fork("f1", 3, new_id="f3")
    assert app.run(agent, workflow_id=again.workflow_id) == ["notes", "sent:notes", "NOTES"]
    assert calls["send"] == 2  # f3 reused f1's send, which reused f0's


def test_retry_of_a_poison_run_gives_its_step_a_fresh_budget(store_url: str) -> None:
    crashes = {"left": 3}
    attempts: list[int] = []

    with stalwart.Stalwart(store_url, max_recoveries=2) as app:

        @app.step(name="parse", retry=stalwart.Retry(max_attempts=10, initial_delay=0))
        def parse() -> str:
            attempts.append(stalwart.attempt())
            if crashes["left"] > 0:
                crashes["left"] -= 1
                raise KeyboardInterrupt  # stands in for os._exit (tests/faults does that)
            return "parsed"

        @app.workflow(name="ingest")
        def ingest() -> str:
            return parse()

        for _ in range(2):
            with pytest.raises(KeyboardInterrupt):
                app.run(ingest, workflow_id="p")
        with pytest.raises(stalwart.WorkflowFailed, match="crashed its worker 2 times"):
            app.run(ingest, workflow_id="p")
        crashes["left"] = 0
        app.retry("p")
        assert app.run(ingest, workflow_id="p") == "parsed"
        assert attempts[-1] == 1  # a fresh budget, not attempt 4 of the old one


@pytest.mark.timeout(30)
def test_cancel_of_a_needs_attention_run_cancels_it_or_says_why_not(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as v1:

        @v1.step(name="search")
        def search() -> str:
            return "notes"

        @v1.step(name="draft")
        def draft(notes: str) -> str:
            raise Crash()

        @v1.workflow(name="writer")
        def writer() -> str:
            return draft(search())

        with pytest.raises(Crash):
            v1.run(writer, workflow_id="r1")

    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as v2:

        @v2.step(name="outline")
        def outline() -> str:
            return "plan"

        @v2.workflow(name="writer")
        def writer2() -> str:
            return outline()

        with pytest.raises(stalwart.NeedsAttention):
            v2.run(writer2, workflow_id="r1")
        try:
            v2.cancel("r1")
        except stalwart.StalwartError:
            return  # refusing loudly is acceptable
        assert v2.handle("r1").status() == "cancelled"


def test_retry_and_fork_keep_a_step_failure_the_workflow_caught(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()
    broken = {"on": True}

    @app.step(name="lookup")
    def lookup() -> str:
        calls["lookup"] += 1
        raise stalwart.NonRetryableError("no such customer")

    @app.step(name="notify")
    def notify(found: str) -> str:
        calls["notify"] += 1
        if broken["on"]:
            raise stalwart.NonRetryableError("mail server down")
        return f"sent ({found})"

    @app.workflow(name="agent")
    def agent() -> str:
        try:
            found = lookup()
        except stalwart.StepFailed:
            found = "unknown"
        return notify(found)

    with pytest.raises(stalwart.WorkflowFailed, match="mail server down"):
        app.run(agent, workflow_id="c")
    broken["on"] = False
    app.retry("c")  # only the failure the run failed through is reopened
    assert app.run(agent, workflow_id="c") == "sent (unknown)"
    assert calls == {"lookup": 1, "notify": 2}
    notified = max(e.seq for e in app.journal("c") if e.name == "notify" and e.seq)
    fork = app.fork("c", from_seq=notified)  # the caught failure lies before from_seq
    assert app.run(agent, workflow_id=fork.workflow_id) == "sent (unknown)"
    assert calls == {"lookup": 1, "notify": 3}


def test_retry_and_fork_reopen_a_task_failure_the_run_failed_with(app: stalwart.Stalwart) -> None:
    """The main task's call that completed after the failure in the task it then awaits is
    no sign the workflow went on from that failure: the run failed with it."""
    broken = {"on": True}

    @app.step(name="flaky", retry=stalwart.Retry.never())
    async def flaky() -> str:
        if broken["on"]:
            raise ConnectionError("the API is down")
        return "a"

    def flaky_failed(workflow_id: str) -> bool:
        journal = app.journal(workflow_id)
        return any(e.name == "flaky" and e.status == "failed" for e in journal)

    @app.step(name="slow")
    async def slow() -> str:
        while broken["on"] and not flaky_failed(stalwart.workflow_id()):
            await asyncio.sleep(0.005)
        return "b"

    @app.workflow(name="overlap")
    async def overlap() -> list[str]:
        task = asyncio.create_task(flaky())
        done = await slow()  # completes after flaky failed for good
        return [await task, done]

    with pytest.raises(stalwart.WorkflowFailed, match="the API is down"):
        app.run(overlap, workflow_id="o")
    fork = app.fork("o", from_seq=3)  # made while the failure is still recorded, run below
    broken["on"] = False
    app.retry("o")
    assert app.run(overlap, workflow_id="o") == ["a", "b"]
    assert app.run(overlap, workflow_id=fork.workflow_id) == ["a", "b"]
