"""200 ms of latency and 5% packet loss on every worker's link to PostgreSQL (the fault lab).

Three workers, each in a network namespace of its own, run chains of steps. First without a
fault (the baseline), then with every link degraded: throughput drops, but no run is lost, no
step runs twice and no live worker's lease is taken (the rules allow a takeover only once a
lease lapsed; a live worker renews every third of its lease, well within 200 ms round trips).
The short form degrades the links for 15 s (``make test``); the ``slow`` one for a minute.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from fault_harness import WorkerHarness
from lab import LabDatabase, Namespace
from lab_agent import LAB_AGENT, lab_app
from worker_agent import chain_expected, intervals

pytestmark = pytest.mark.faults

WORKERS = 3
LINKS = 5
LEASE_S = 10.0


def _degraded_links_lose_nothing(
    workers: WorkerHarness, db: LabDatabase, make: Callable[[], Namespace], degraded_s: float
) -> None:
    spaces = [make() for _ in range(WORKERS)]
    with lab_app(db.url, workers.workdir) as (app, wf):
        procs = [
            workers.start(
                program=LAB_AGENT,
                wrap=ns.wrap,
                url=db.url_in(ns),
                concurrency=4,
                lease_seconds=LEASE_S,
            )
            for ns in spaces
        ]
        baseline_runs = 40
        began = time.monotonic()
        handles = [
            app.start(wf["chain_agent"], LINKS, 0.0, workflow_id=f"base-{i}")
            for i in range(baseline_runs)
        ]
        for handle in handles:
            assert handle.result(timeout=120) == chain_expected(LINKS), workers.describe()
        baseline = baseline_runs * LINKS / (time.monotonic() - began)

        for ns in spaces:
            ns.degrade(delay_ms=200, loss=0.05)
        slow_runs = int(degraded_s * 2)  # more than a degraded fleet finishes in the window
        handles = [
            app.start(wf["chain_agent"], LINKS, 0.0, workflow_id=f"slow-{i}")
            for i in range(slow_runs)
        ]
        links_before = len(workers.executions())
        time.sleep(degraded_s)  # the fault lasts this long: a duration, not a wait for a state
        degraded = (len(workers.executions()) - links_before) / degraded_s
        for ns in spaces:
            ns.heal()
        healed = time.monotonic()
        for handle in handles:
            assert handle.result(timeout=180) == chain_expected(LINKS), workers.describe()
        drained = time.monotonic() - healed

        print(
            f"links/s: baseline {baseline:.1f}, 200 ms + 5% loss {degraded:.1f} "
            f"(ratio {degraded / baseline:.3f}); the rest done {drained:.1f} s after healing"
        )
        assert degraded < baseline, (degraded, baseline)
        output = "".join(workers.output(proc) for proc in procs)
        assert "lease lost to another worker" not in output, workers.describe()
        ran = Counter((line["wid"], line["i"]) for line in workers.executions())
        assert max(ran.values()) == 1, [k for k, n in ran.items() if n > 1]
        assert len(ran) == (baseline_runs + slow_runs) * LINKS
        assert len({pid for _wid, _seq, pid, _s, _e in intervals(workers.workdir)}) == WORKERS


def test_latency_and_loss_on_every_link_slow_the_fleet_and_lose_nothing(
    lab_workers: WorkerHarness, lab_pg: LabDatabase, netns: Callable[[], Namespace]
) -> None:
    _degraded_links_lose_nothing(lab_workers, lab_pg, netns, degraded_s=15.0)


@pytest.mark.slow
def test_a_minute_of_latency_and_loss_on_every_link_loses_nothing(
    lab_workers: WorkerHarness, lab_pg: LabDatabase, netns: Callable[[], Namespace]
) -> None:
    _degraded_links_lose_nothing(lab_workers, lab_pg, netns, degraded_s=60.0)
