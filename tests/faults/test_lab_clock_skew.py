"""A worker whose clock is 30 s ahead, or behind, over PostgreSQL (libfaketime; the fault lab).

A fleet compares times that different machines write: lease expiries, timers' wake times,
schedules' ticks. Over PostgreSQL they are all read by the server's clock (``ServerClock``), so
a worker with a skewed clock must neither take a live worker's lease, nor wake a timer early
(or late), nor start a tick before it is due (or miss it), nor stamp a payload row it stores
with a time the collector would misread. The test watches with its own clock,
which is the server's (the lab's server runs on this host), allowing the error of reading a
server's clock over a network (:data:`READ_S`). On SQLite, one host, every process
reads the same clock: there is nothing to skew.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections import Counter

import psycopg
import pytest
from fault_harness import WorkerHarness
from lab import LabDatabase, require, skewed_clock_env
from lab_agent import LAB_AGENT, lab_app

pytestmark = pytest.mark.faults

SKEW_S = 30.0
LEASE_S = 3.0
SLEEP_S = 3.0
SERVE_S = 7.0
EVERY_2S = "* * * * * */2"
# How far off a worker may read the server's clock: half the quickest of a few round trips
# (ServerClock); generous, for a loaded machine, and still far below the skew.
READ_S = 0.5


@pytest.mark.parametrize("skew", [SKEW_S, -SKEW_S], ids=["ahead", "behind"])
def test_a_skewed_worker_keeps_leases_timers_and_schedules_right(
    lab_workers: WorkerHarness, lab_pg: LabDatabase, skew: float
) -> None:
    require("faketime")
    workers = lab_workers
    with lab_app(lab_pg.url, workers.workdir) as (app, wf):
        skewed = workers.start(
            program=LAB_AGENT, lease_seconds=LEASE_S, env=skewed_clock_env(skew), concurrency=4
        )
        # Timers and ticks, the skewed worker alone serving them.
        began = time.monotonic()
        sleepers = [
            app.start(wf["sleepy_agent"], SLEEP_S, workflow_id=f"sleep-{i}") for i in range(3)
        ]
        big = app.start(wf["big_agent"], 5000, workflow_id="big-1")
        first_tick = app.schedule(wf["tick_job"], EVERY_2S, name="every2s").next_tick.timestamp()
        seen: dict[str, float] = {}
        deadline = time.monotonic() + SERVE_S
        while time.monotonic() < deadline:
            for run in app.list_workflows(name="tick_job", limit=100):
                seen.setdefault(run.workflow_id, time.time())
            time.sleep(0.05)
        served_until = time.time()
        app.unschedule("every2s")
        for handle in sleepers:
            handle.result(timeout=SLEEP_S + 20)  # a worker 30 s behind would sleep 30 s more
        slept = time.monotonic() - began
        assert slept >= SLEEP_S, slept  # a worker 30 s ahead would have woken them at once

        # Payload rows are stamped by the server's clock too: the collector compares their age
        # with it, and a row stamped 30 s (or an hour) in the past could look collectable.
        assert big.result(timeout=30) == len("big-1:") + 5000
        with psycopg.connect(lab_pg.url) as conn:
            stamps = [row[0] for row in conn.execute("SELECT touched_at FROM payloads")]
        assert stamps and all(abs(t - time.time()) < READ_S + 20 for t in stamps), stamps

        ticks = {
            wid: _dt.datetime.strptime(wid.split("@", 1)[1], "%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=_dt.UTC)
            .timestamp()
            for wid in seen
        }
        early = {wid: ticks[wid] - at for wid, at in seen.items() if at < ticks[wid] - READ_S}
        assert not early, f"ticks started before they were due: {early}"
        due = list(range(int(first_tick), int(served_until) - 2, 2))
        assert len(due) >= 2 and all(t in ticks.values() for t in due), (due, ticks)

        # Leases: a worker on the right clock beside it; neither takes the other's live runs.
        fair = workers.start(program=LAB_AGENT, lease_seconds=LEASE_S, concurrency=4)
        chains = [app.start(wf["slow_chain"], 3, 1.0, workflow_id=f"lease-{i}") for i in range(6)]
        for handle in chains:
            assert handle.result(timeout=60) == 3, workers.describe()
        ran = Counter(
            (line["wid"], line["i"]) for line in workers.executions() if line["step"] == "slow_link"
        )
        assert len(ran) == 18 and max(ran.values()) == 1, ran  # no live lease was taken
        pids = {line["pid"] for line in workers.executions() if line["step"] == "slow_link"}
        assert pids == {skewed.pid, fair.pid}, pids  # both really served
        for proc in (skewed, fair):
            assert "lease lost" not in workers.output(proc), workers.describe()
