"""Runs on real worker processes race to update one shared key by compare-and-set, on SQLite
and PostgreSQL, and workers die under them (SIGKILL):

* no update is lost: the key ends at the total of every run's increments, and its history holds
  each version exactly once, written by the run that made it;
* a worker killed right after a write committed (its run parked in the next step) costs no
  second write: the write and its journal entry were one transaction, so the run's replay on
  another worker finds the entry and goes on;
* a worker killed at an arbitrary moment of the race writes nothing twice either.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from fault_harness import WorkerHarness
from shared_agent import HANG_ENV, PAUSE_ENV, declare

import stalwart

AGENT = Path(__file__).with_name("shared_agent.py")

pytestmark = pytest.mark.timeout(120)


def start(workers: WorkerHarness, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return workers.start(program=AGENT, concurrency=4, env=env)


def check_no_lost_update(app: stalwart.Stalwart, key: str, runs: dict[str, int]) -> None:
    """The key counted every increment once; each run's writes are its journaled wins."""
    history = app.shared_history(key)
    total = sum(runs.values())
    assert [w.version for w in history] == list(range(1, total + 1))
    assert [w.value for w in history] == [w.version for w in history]  # each read its predecessor
    assert Counter(w.by for w in history) == runs
    assert app.shared_get(key) == stalwart.Versioned(total, total)
    for wid, n in runs.items():
        won = [
            e.output["version"]
            for e in app.journal(wid)
            if e.kind == "shared" and e.name == f"set {key}" and e.output is not None
        ]
        assert sorted(won) == sorted(w.version for w in history if w.by == wid), wid
        assert len(won) == n, wid


def test_workers_racing_on_one_key_lose_no_update(workers: WorkerHarness) -> None:
    procs = [start(workers), start(workers)]
    app = stalwart.Stalwart(workers.url)
    try:
        wf = declare(app)
        runs = {f"racer-{i}": 8 for i in range(6)}
        handles = [app.start(wf, "plan", n, workflow_id=wid) for wid, n in runs.items()]
        for handle in handles:
            handle.result(timeout=90)  # how often its compare-and-sets lost: the interleaving's
        assert all(proc.poll() is None for proc in procs), workers.describe()
        check_no_lost_update(app, "plan", runs)
    finally:
        app.close()


def test_a_kill_right_after_a_write_does_not_write_again(workers: WorkerHarness) -> None:
    wid = "planner"
    first = start(workers, env={HANG_ENV: f"{wid}:2"})
    app = stalwart.Stalwart(workers.url)
    try:
        wf = declare(app)
        handle = app.start(wf, "plan", 5, workflow_id=wid)
        marker = workers.marker(wid, "wrote")
        workers.wait_for(marker.exists, "the third write committed", 60, [first])
        assert [w.version for w in app.shared_history("plan")] == [1, 2, 3]
        workers.kill(first)
        start(workers)  # takes the run over at once: the dead worker's pid is gone
        assert handle.result(timeout=60) == 0
        check_no_lost_update(app, "plan", {wid: 5})
        # The step after the third write ran again (it never finished); the write did not.
        assert [line["i"] for line in workers.executions(wid)] == [0, 1, 2, 2, 3, 4]
    finally:
        app.close()


def test_a_worker_killed_mid_race_writes_nothing_twice(workers: WorkerHarness) -> None:
    slow = {PAUSE_ENV: "0.05"}  # each run takes a while, so the kill lands mid-race
    victim, survivor = start(workers, env=slow), start(workers, env=slow)
    app = stalwart.Stalwart(workers.url)
    try:
        wf = declare(app)
        runs = {f"racer-{i}": 10 for i in range(6)}
        handles = [app.start(wf, "plan", n, workflow_id=wid) for wid, n in runs.items()]
        workers.wait_for(
            lambda: len(app.shared_history("plan")) >= 15, "a quarter of the writes", 60, [victim]
        )
        workers.kill(victim)
        assert len(app.shared_history("plan")) < sum(runs.values())  # the race was not over
        start(workers, env=slow)
        for handle in handles:
            handle.result(timeout=90)
        assert survivor.poll() is None, workers.describe()
        check_no_lost_update(app, "plan", runs)
    finally:
        app.close()
