"""Schedules across an outage that starts with every worker SIGKILLed, in real time.

Three schedules tick every 2 seconds, one per catch-up policy. Two workers serve; both are
SIGKILLed a moment before a tick, so their rows stay behind in the store (refreshed shortly
before the tick) while no worker is alive to start it. A worker starts again, after the rows
went stale (a long outage) or at once (while they still look fresh). Each tick that came due
after the kill and before the restart came due while no worker ran: ``all`` starts each,
``latest`` only the newest and ``none`` none, whatever the dead workers' rows say. Ticks of
the second before the kill are left out of the assertions (a worker may have been about to
start one when it died); no assertion is about how soon a tick starts.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections import Counter

import pytest
from crash_agent import Recorder
from fault_harness import CHILD_WAIT_S, WorkerHarness
from schedule_agent import declare
from test_fleet_schedules import AGENT, EVERY_2S, POLICIES, _stop, _ticks

import stalwart

LEASE_S = 3.0  # the dead rows look alive for a lease after their last refresh
SERVE_S = 4.0
AFTER_S = 4.0


def _worker(workers: WorkerHarness) -> subprocess.Popen[bytes]:
    return workers.start(program=AGENT, lease_seconds=LEASE_S, concurrency=4)


def _kill_before_tick(workers: WorkerHarness, fleet: list[subprocess.Popen[bytes]]) -> float:
    """SIGKILL every worker 0.3 s before the next even second (a tick); returns when the
    kill was sent."""
    tick = 2 * math.ceil((time.time() + 0.8) / 2)
    time.sleep(max(0.0, tick - 0.3 - time.time()))  # a tick is a time of day: wait for it
    sent = time.time()
    for proc in fleet:
        workers.kill(proc)
    return sent


@pytest.mark.parametrize("outage_s", [7.0, 0.5], ids=["long-outage", "quick-restart"])
def test_ticks_due_after_every_worker_was_killed_start_per_catch_up(
    workers: WorkerHarness, outage_s: float
) -> None:
    with stalwart.Stalwart(workers.url) as app:
        job = declare(app, Recorder(workers.workdir, []))
        fleet = [_worker(workers), _worker(workers)]
        first = {
            policy: app.schedule(
                job, EVERY_2S, name=f"every2s-{policy}", catch_up=policy
            ).next_tick.timestamp()
            for policy in POLICIES
        }
        time.sleep(SERVE_S)
        kill_sent = _kill_before_tick(workers, fleet)
        killed = time.time()
        time.sleep(outage_s)
        again = [_worker(workers)]

        def row() -> list[stalwart.WorkerInfo]:
            return [w for w in app.workers() if w.pid == again[0].pid]

        workers.wait_for(lambda: bool(row()), "the new worker's row", CHILD_WAIT_S, again)
        back = row()[0].started_at.timestamp()

        def handled() -> bool:  # every tick due so far was started or skipped
            now = time.time()
            return all(s.next_tick.timestamp() > now for s in app.schedules())

        time.sleep(AFTER_S)
        workers.wait_for(handled, "the schedules handled", CHILD_WAIT_S, again)
        stop_sent = time.time()
        _stop(workers, again)
        end = time.time()

        executions = Counter(line["wid"] for line in workers.executions())
        assert max(executions.values()) == 1, executions
        for policy in POLICIES:
            ticks = _ticks(app, f"every2s-{policy}")
            grid = [float(t) for t in range(int(first[policy]), int(end) + 1, 2)]
            assert sorted(ticks) == [t for t in grid if t in ticks], "a run off the tick grid"
            for tick, run in ticks.items():
                assert run.created_at.timestamp() >= tick, f"{run.workflow_id} started early"
            while_serving = [t for t in grid if t < kill_sent - 1.0 or back <= t < stop_sent]
            missing = [t for t in while_serving if t not in ticks]
            assert not missing, f"{policy}: ticks due while a worker ran never started {missing}"
            gap = [t for t in grid if killed < t < back]
            assert gap, (killed, back)
            started_in_gap = [t for t in gap if t in ticks]
            expected = {"all": gap, "latest": [max(gap)], "none": []}[policy]
            assert started_in_gap == expected, (policy, outage_s, gap, started_in_gap)
    assert "firing schedules failed" not in workers.describe()
