"""Schedules fired by a fleet of real worker processes, in real time (it is what this tests).

Three schedules tick every 2 seconds, one per catch-up policy, declared by the test process
(any process of an app may). Two workers serve for 10 seconds; then every worker stops
(SIGTERM), none runs for 6 seconds, and two start again. Each tick that came due while a
worker ran is started exactly once, none before its tick; of the ticks that came due while no
worker ran, ``all`` starts each, ``latest`` only the newest and ``none`` none. No assertion is
about how soon a tick starts: only which ticks start, and how many times.
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from crash_agent import Recorder
from fault_harness import CHILD_WAIT_S, WorkerHarness
from schedule_agent import declare

import stalwart

AGENT = Path(__file__).with_name("schedule_agent.py")
POLICIES = ("latest", "all", "none")
EVERY_2S = "* * * * * */2"
SERVE_S = 10.0
OUTAGE_S = 6.0
AGAIN_S = 4.0
LEASE_S = 2.0


def _ticks(app: stalwart.Stalwart, name: str) -> dict[float, stalwart.WorkflowInfo]:
    """The schedule's runs by tick (read back from their ids)."""
    prefix = f"{name}@"
    found = {}
    for run in app.list_workflows(limit=1000):
        if run.workflow_id.startswith(prefix):
            when = _dt.datetime.strptime(run.workflow_id[len(prefix) :], "%Y-%m-%dT%H:%M:%SZ")
            found[when.replace(tzinfo=_dt.UTC).timestamp()] = run
    return found


def _fleet(workers: WorkerHarness) -> list[subprocess.Popen[bytes]]:
    return [workers.start(program=AGENT, lease_seconds=LEASE_S, concurrency=4) for _ in range(2)]


def _stop(workers: WorkerHarness, fleet: list[subprocess.Popen[bytes]]) -> None:
    for proc in fleet:
        os.kill(proc.pid, signal.SIGTERM)
    for proc in fleet:
        proc.wait(timeout=CHILD_WAIT_S)
        assert proc.returncode == 0, workers.describe()


def test_a_fleet_starts_each_tick_once_and_catches_up_per_policy(workers: WorkerHarness) -> None:
    with stalwart.Stalwart(workers.url) as app:
        job = declare(app, Recorder(workers.workdir, []))
        fleet = _fleet(workers)
        first = {
            policy: app.schedule(
                job, EVERY_2S, name=f"every2s-{policy}", catch_up=policy
            ).next_tick.timestamp()
            for policy in POLICIES
        }
        time.sleep(SERVE_S)
        stopping = time.time()
        _stop(workers, fleet)
        stopped = time.time()
        time.sleep(OUTAGE_S)
        again = _fleet(workers)
        workers.wait_for(lambda: len(app.workers()) == 2, "the fleet's rows", 30.0, again)
        back = min(w.started_at for w in app.workers()).timestamp()
        time.sleep(AGAIN_S)
        stopping_again = time.time()
        _stop(workers, again)
        end = time.time()

        executions = Counter(line["wid"] for line in workers.executions())
        assert max(executions.values()) == 1, executions  # no tick's run executed twice
        for policy in POLICIES:
            ticks = _ticks(app, f"every2s-{policy}")
            grid = [float(t) for t in range(int(first[policy]), int(end) + 1, 2)]
            assert sorted(ticks) == [t for t in grid if t in ticks], "a run off the tick grid"
            for tick, run in ticks.items():
                assert run.created_at.timestamp() >= tick, f"{run.workflow_id} started early"
                if run.status == "completed":
                    assert executions[run.workflow_id] == 1, run.workflow_id
            while_serving = [t for t in grid if t < stopping or back <= t < stopping_again]
            missing = [t for t in while_serving if t not in ticks]
            assert not missing, f"{policy}: ticks due while a worker ran never started {missing}"
            gap = [t for t in grid if stopped < t < back]
            assert len(gap) >= 2, (stopped, back)
            started_in_gap = [t for t in gap if t in ticks]
            expected = {"all": gap, "latest": [max(gap)], "none": []}[policy]
            assert started_in_gap == expected, (policy, gap, started_in_gap)
    assert "firing schedules failed" not in workers.describe()
