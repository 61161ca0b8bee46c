"""Review: leases, recovery, cancellation and worker claims (strict xfails prove the bugs)."""

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
from stalwart._store import Entry
from stalwart._worker import Worker
from stalwart.testing import FakeClock, runtime_of, store_of

pytestmark = pytest.mark.timeout(30)


class Crash(BaseException):
    """Stands in for kill -9 / Ctrl-C in the middle of a step (as in docs/replay.md)."""


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'review.db'}"


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
        taken, _ = store.take_lease(
            "w", owner="holder-B", expected_owner="holder-A", now=now + 31, lease_until=now + 61
        )
        assert not taken


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
        worker = Worker(app, concurrency=1)
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
        with sqlite3.connect(tmp_path / "review.db") as db:
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
        assert owner.split("/")[1] == str(pid), (owner, pid)
