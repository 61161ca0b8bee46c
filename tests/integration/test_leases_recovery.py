"""Leases and recovery: a live lease is never taken and a stale holder never writes, a run left
interrupted is recovered (and a cancel of it honoured), each process and claim owns its lease."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import stalwart
from lease_loss import lease_lost_warnings
from stalwart import testing
from stalwart._leases import HOST
from stalwart._store import Entry
from stalwart.testing import FakeClock, runtime_of, store_of

pytestmark = pytest.mark.timeout(30)


class Crash(BaseException):
    """Stands in for kill -9 / Ctrl-C in the middle of a step (as in docs/replay.md)."""


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def _entry(now: float) -> Entry:
    return Entry(kind="run", name="started", status="completed", started_at=now, finished_at=now)


def test_take_lease_refuses_a_lease_that_is_still_live(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:
        store = store_of(app)
        now = 1_000.0
        store.create_run(
            workflow_id="w",
            name="wf",
            status="running",
            queue="default",
            priority=0,
            input=b'J{"args":[],"kwargs":{}}',
            now=now,
            owner="holder-A",
            lease_until=now + 30,
            entry=_entry(now),
        )
        # B read the row at now+31 (expired) ... A's keeper renews meanwhile ...
        store.renew_lease("w", owner="holder-A", lease_until=now + 61)
        # ... and B's compare-and-set still succeeds, though the lease is live until now+61.
        taken = store.take_lease(
            "w", owner="holder-B", expected_owner="holder-A", now=now + 31, lease_until=now + 61
        ).taken
        assert not taken


def test_same_app_takeover_does_not_record_a_step_twice(tmp_path: Path) -> None:
    """Regression test: at HEAD 09e4491 the owner was per app and this recorded two completions
    of one step; the per-claim owners in the working tree (Core.claim_owner) fix it."""
    clock = FakeClock()
    started = threading.Semaphore(0)
    release = {1: threading.Event(), 2: threading.Event()}
    reached_next = threading.Event()
    finish = threading.Event()
    with stalwart.Stalwart(_url(tmp_path), clock=clock) as app:

        @app.step
        def slow() -> str:
            attempt = stalwart.attempt()
            started.release()
            release[min(attempt, 2)].wait(5)
            return f"done by attempt {attempt}"

        @app.step
        def after(value: str) -> str:
            reached_next.set()
            finish.wait(5)
            return value

        @app.workflow
        def wf() -> str:
            return after(slow())

        results: list[Any] = []

        def runner() -> None:
            try:
                results.append(app.run(wf, workflow_id="w"))
            except BaseException as exc:  # report, do not hang the test
                results.append(exc)

        first = threading.Thread(target=runner)
        first.start()
        assert started.acquire(timeout=5)
        clock.advance(runtime_of(app).lease_seconds + 1)  # the lease lapsed (keeper stalled)
        second = threading.Thread(target=runner)
        second.start()
        assert started.acquire(timeout=2)  # the takeover runs attempt 2 (fine: lease lapsed)
        release[2].set()  # the new holder records attempt 2 ...
        assert reached_next.wait(5)
        release[1].set()  # ... then the stale invocation finishes attempt 1
        first.join(0.5)
        finish.set()
        first.join(5)
        second.join(5)
        completed = [
            (e.seq, e.attempt)
            for e in app.journal("w")
            if e.name.endswith("slow") and e.status == "completed"
        ]
        # The stale invocation must be fenced off: one completion per step, ever.
        assert len(completed) == 1, completed


def test_worker_claims_a_run_whose_lease_was_released_mid_flight(tmp_path: Path) -> None:
    crash = True
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        def work() -> int:
            if crash:
                raise Crash()
            return 1

        @app.workflow
        def wf() -> int:
            return work()

        with pytest.raises(Crash):
            app.run(wf, workflow_id="w")  # e.g. Ctrl-C (KeyboardInterrupt) or sys.exit()
        crash = False
        worker = testing.worker(app, concurrency=1)
        thread = threading.Thread(target=worker.serve)
        thread.start()
        try:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and app.handle("w").status() != "completed":
                time.sleep(0.02)
        finally:
            worker.stop()
            thread.join(10)
        assert app.handle("w").status() == "completed"


def test_cancel_of_an_interrupted_run_is_honoured_on_recovery(tmp_path: Path) -> None:
    crash = True
    calls: list[str] = []
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        def work() -> int:
            calls.append("work")
            if crash:
                raise Crash()
            return 1

        @app.workflow
        def wf() -> int:
            return work()

        with pytest.raises(Crash):
            app.run(wf, workflow_id="w")
        crash = False
        app.cancel("w")  # "requested": the run is 'running' (its holder died)
        with pytest.raises(stalwart.WorkflowCancelled):
            app.run(wf, workflow_id="w")
        assert calls == ["work"]


def test_corrupt_record_is_not_reported_as_a_crash_loop(tmp_path: Path) -> None:
    crash = True
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock(), max_recoveries=3) as app:

        @app.step
        def first() -> str:
            return "one"

        @app.step
        def second() -> str:
            if crash:
                raise Crash()
            return "two"

        @app.workflow
        def wf() -> list[str]:
            return [first(), second()]

        with pytest.raises(Crash):
            app.run(wf, workflow_id="w")  # one real interruption
        crash = False
        with sqlite3.connect(tmp_path / "runs.db") as db:
            db.execute(
                "UPDATE journal SET output = x'4a7b' WHERE kind = 'step' AND status = 'completed'"
            )
        for _ in range(3):
            with pytest.raises(stalwart.CorruptRecord):
                app.run(wf, workflow_id="w")


def _report_owner(app: stalwart.Stalwart, conn: Any) -> None:
    conn.send((os.getpid(), runtime_of(app).owner, runtime_of(app).new_claim_owner()))
    conn.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forked_process_gets_its_own_lease_owner(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:
        ctx = multiprocessing.get_context("fork")
        ours, theirs = ctx.Pipe()
        child = ctx.Process(target=_report_owner, args=(app, theirs))
        child.start()
        pid, owner, child_claim = ours.recv()
        child.join(10)
        parent_claim = runtime_of(app).new_claim_owner()
        assert child_claim != parent_claim  # two processes, one lease owner: no fencing
        assert owner.split("-")[-2] == str(pid), (owner, pid)  # host-pid-suffix
        assert child_claim.startswith(f"{HOST}/{pid}/") and child_claim.split("/")[-1].startswith(
            f"{owner}#"
        ), child_claim


def test_a_run_failed_for_crash_looping_cancels_its_children(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock(), max_recoveries=2) as app:

        @app.workflow
        def kid() -> Any:
            return stalwart.wait_for_event("go")

        @app.step
        def explode() -> None:
            raise Crash()

        @app.workflow
        def parent() -> None:
            stalwart.start_child(kid, workflow_id="kid")
            explode()

        for _ in range(2):
            with pytest.raises(Crash):
                app.run(parent, workflow_id="p")
        with pytest.raises(stalwart.WorkflowFailed, match="crashed its worker"):
            app.run(parent, workflow_id="p")
        assert app.handle("kid").status() == "cancelled"


def test_a_lost_leases_warning_names_no_step_whose_mark_did_not_land(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An irreversible step's ``scheduled`` mark that finds the lease lost: its attempt never
    began, so the warning names no step as one that ran."""
    clock = FakeClock()
    with stalwart.Stalwart(_url(tmp_path), clock=clock) as app:

        @app.step(irreversible=True)
        def charge(order: str) -> str:
            return f"charged {order}"

        @app.workflow
        def pays() -> str:
            clock.advance(testing.runtime_of(app).lease_seconds + 1)  # its renewals stalled
            testing.claim_run(app, "p")  # another worker took it
            return charge("o1")

        lost = lease_lost_warnings(app, pays, "p", caplog)
        assert not any("ran and may have had its effect" in message for message in lost), lost
        assert [e for e in app.journal("p") if e.kind == "step"] == []  # its mark did not land
