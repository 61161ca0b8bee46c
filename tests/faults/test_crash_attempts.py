"""Attempts interrupted by a crash are counted: a step that kills its worker runs out of attempts.

The steps here SIGKILL their own process (``os.kill(os.getpid(), SIGKILL)``): a real kill, no
exception is raised and nothing in the process runs afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest
from fault_harness import FAILED_EXIT, Harness, cli, step_entries

from stalwart import testing

pytestmark = pytest.mark.timeout(60)


def test_step_that_crashes_its_worker_fails_for_good_after_max_attempts(agent: Harness) -> None:
    wid = "doomed-1"
    first = agent.run("doomed", wid)
    assert first.killed, first.describe()
    assert agent.counts(wid) == {"before": 1, "doomed": 1}

    second = agent.run("doomed", wid)  # recovery 1: attempt 1 counted, attempt 2 runs
    assert second.killed, second.describe()
    assert agent.counts(wid) == {"before": 1, "doomed": 2}

    third = agent.run("doomed", wid)  # recovery 2: attempt 2 counted, no attempts left
    assert third.returncode == FAILED_EXIT, third.describe()
    outcome = third.outcome
    assert outcome["status"] == "failed"
    assert "AttemptInterrupted" in outcome["error"], outcome
    assert "doomed" in outcome["error"], outcome
    assert agent.counts(wid) == {"before": 1, "doomed": 2}  # not executed a third time
    attempts = [line["attempt"] for line in agent.executions(wid) if line["step"] == "doomed"]
    assert attempts == [1, 2]  # stalwart.attempt() counts across crashes

    with agent.app() as app:
        assert app.handle(wid).status() == "failed"
        entries = step_entries(app, wid, "doomed")
        assert [(e.status, e.attempt) for e in entries] == [("failed", 1), ("failed", 2)]
        assert all(e.error and e.error.startswith("AttemptInterrupted") for e in entries)
        assert step_entries(app, wid, "after") == []
        info = app.list_workflows(status="failed")
        assert [w.workflow_id for w in info] == [wid]
        assert info[0].error is not None
        assert "AttemptInterrupted" in info[0].error

    fourth = agent.run("doomed", wid)  # a terminal run: nothing executes, same outcome
    assert fourth.returncode == FAILED_EXIT, fourth.describe()
    assert fourth.outcome["error"] == outcome["error"]
    assert agent.counts(wid) == {"before": 1, "doomed": 2}


def test_concurrent_step_that_crashes_its_worker_runs_out_of_attempts(agent: Harness) -> None:
    # steady (first in the gather) and crasher are both in flight at every crash: both are
    # charged, so crasher's Retry(max_attempts=2) runs out on the second recovery.
    wid = "gather-crash-1"
    for _ in range(2):
        exited = agent.run("gather_crash", wid)
        assert exited.killed, exited.describe()
    third = agent.run("gather_crash", wid)  # crasher's 2 attempts were both interrupted
    assert not third.killed, f"crasher ran again: {agent.counts(wid)}"
    assert third.returncode == FAILED_EXIT, third.describe()
    assert "crasher" in third.outcome["error"]
    assert "AttemptInterrupted" in third.outcome["error"]
    assert agent.counts(wid)["crasher"] == 2


def test_poison_run_fails_after_max_recoveries(agent: Harness) -> None:
    # crashy may take 50 attempts, but max_recoveries=2 stops the crash loop first.
    wid = "poison-1"
    extra = ["--max-recoveries", "2"]
    runs = []
    for _ in range(4):
        exited = agent.run("poison", wid, extra=extra)
        runs.append(exited)
        if not exited.killed:
            break
    last = runs[-1]
    assert not last.killed, f"still crash-looping after {len(runs)} runs: {agent.counts(wid)}"
    assert last.returncode == FAILED_EXIT, last.describe()
    assert "crashed its worker 2 times" in last.outcome["error"]
    assert agent.counts(wid)["crashy"] <= 3
    with agent.app() as app:
        assert app.handle(wid).status() == "failed"


def test_a_poison_run_journals_every_attempt_it_killed(agent: Harness) -> None:
    """The attempt in flight at the crash that used up the run's recoveries is charged in the
    transaction that fails the run: the usage and the journal count every killed attempt."""
    wid = "poison-2"
    extra = ["--max-recoveries", "3"]
    for _ in range(5):
        exited = agent.run("poison", wid, extra=extra)
        if not exited.killed:
            break
    assert exited.returncode == FAILED_EXIT, exited.describe()
    killed = [line["attempt"] for line in agent.executions(wid) if line["step"] == "crashy"]
    assert len(killed) == 3, killed
    with agent.app() as app:
        entries = step_entries(app, wid, "crashy")
        assert [(e.status, e.attempt) for e in entries] == [("failed", n) for n in (1, 2, 3)]
        assert all(e.error and e.error.startswith("AttemptInterrupted") for e in entries)
        assert app.usage(wid).attempts == 3
        assert entries[-1].started_at <= entries[-1].finished_at
        ended = app.journal(wid)[-1]
        assert (ended.kind, ended.name, ended.status) == ("run", "finished", "failed")
        assert entries[-1].finished_at <= ended.started_at


def _kill_in_backoff(agent: Harness, wid: str, failure: int, *extra: str) -> None:
    """Run the backoff scenario and SIGKILL it during the backoff after failure ``failure``."""
    proc = agent.spawn("backoff", wid, extra=extra)
    failed = agent.workdir / f"failed-{wid}-{failure}"
    deadline = time.monotonic() + 30
    while not failed.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(1.0)  # the attempt failed and was recorded; the 3 s backoff is under way
    os.kill(proc.pid, signal.SIGKILL)
    assert agent.finish(proc, time.monotonic()).killed


def test_a_crash_during_a_backoff_costs_no_attempt(agent: Harness) -> None:
    wid = "backoff-1"
    _kill_in_backoff(agent, wid, 1)

    resumed = agent.run("backoff", wid)  # attempt 2 never began: it runs as attempt 2
    assert (resumed.outcome["status"], resumed.outcome["result"]) == ("completed", 14), (
        resumed.describe()
    )
    attempts = [line["attempt"] for line in agent.executions(wid) if line["step"] == "flaky"]
    assert attempts == [1, 2]
    with agent.app() as app:
        entries = step_entries(app, wid, "flaky")
        assert [(e.status, e.attempt) for e in entries] == [("failed", 1), ("completed", 2)]


def test_a_crash_during_a_retry_is_charged_to_that_retry(agent: Harness) -> None:
    wid = "backoff-2"
    agent.crash("backoff", wid, at=["flaky"])  # attempt 2 hangs after the backoff; killed
    resumed = agent.run("backoff", wid)  # attempt 2 is charged; attempt 3 runs
    assert (resumed.outcome["status"], resumed.outcome["result"]) == ("completed", 14), (
        resumed.describe()
    )
    attempts = [line["attempt"] for line in agent.executions(wid) if line["step"] == "flaky"]
    assert attempts == [1, 2, 3]
    with agent.app() as app:
        entries = step_entries(app, wid, "flaky")
        assert [(e.status, e.attempt) for e in entries] == [
            ("failed", 1),
            ("failed", 2),
            ("completed", 3),
        ]
        assert entries[1].error is not None and entries[1].error.startswith("AttemptInterrupted")


def test_a_retry_mark_from_before_a_redrive_charges_nothing_after_it(agent: Harness) -> None:
    """The mark of a retry that began before ``app.retry`` must not survive it: a crash in the
    backoff after the redrive would otherwise charge a retry that never ran."""
    wid = "backoff-3"
    budget = ["--attempts", "2", "--fail-times", "3"]
    dead = agent.run("backoff", wid, extra=[*budget, "--delay", "0.05"])
    assert dead.returncode == FAILED_EXIT, dead.describe()  # attempts 1 and 2 failed
    with agent.app() as app:
        app.retry(wid)
    _kill_in_backoff(agent, wid, 3, *budget)  # attempt 1 of the new budget fails
    resumed = agent.run("backoff", wid, extra=budget)
    assert (resumed.outcome["status"], resumed.outcome["result"]) == ("completed", 14), (
        resumed.describe()
    )
    attempts = [line["attempt"] for line in agent.executions(wid) if line["step"] == "flaky"]
    assert attempts == [1, 2, 1, 2]  # attempt 2 of the new budget ran, uncharged


def test_an_interrupted_attempt_is_journaled_with_its_start_and_how_long_it_ran(
    agent: Harness,
) -> None:
    wid = "span-1"
    lease = 0.6  # renewed every 0.2 s: the holder's last sign of life comes soon after the start
    with agent.app() as app:
        store = testing.store_of(app)
        published: dict[str, Any] = {}

        def running_a_while() -> bool:
            row = store.get_run(wid)
            if row is None or not row.current_step:
                return False
            step = json.loads(row.current_step)
            published.update(step)
            alive = (row.lease_expires_at or 0.0) - lease
            return bool(step["name"] == "s3" and alive > step["started_at"])

        agent.crash("sync", wid, at=["s3"], also=running_a_while, lease_seconds=lease)
        assert agent.run("sync", wid).returncode == 0
        journal = app.journal(wid)
    interrupted, again = step_entries_of(journal, "s3")
    assert interrupted.status == "failed" and again.status == "completed"
    assert interrupted.error is not None and "interrupted after ~" in interrupted.error
    assert interrupted.started_at.timestamp() == pytest.approx(published["started_at"], abs=1e-5)
    resumed = next(e for e in journal if e.kind == "run" and e.name == "resumed" and e.output)
    assert interrupted.started_at < interrupted.finished_at <= resumed.started_at
    shown = cli(agent.url, "show", wid, cwd=agent.workdir)
    assert shown.returncode == 0, shown.stderr
    line = next(row for row in shown.stdout.splitlines() if "AttemptInterrupted" in row)
    assert "interrupted after ~" in line and " ~" in line.split("AttemptInterrupted")[0]


def step_entries_of(journal: list[Any], name: str) -> list[Any]:
    """The journal entries of step ``name``."""
    return [e for e in journal if e.kind == "step" and e.name == name]
