"""The lab's PostgreSQL restarted twice under load: workers reconnect on their own, every run
completes, nothing is recorded twice (the fault lab's own server: no other test is touched,
unlike ``test_postgres_restart.py`` which restarts the shared one and so runs alone).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from fault_harness import WorkerHarness, step_entries
from lab import LabDatabase, Namespace
from lab_agent import LAB_AGENT, lab_app
from worker_agent import chain_expected

pytestmark = pytest.mark.faults

RUNS = 60
LINKS = 5


def test_two_restarts_of_postgres_under_load_every_run_completes(
    lab_workers: WorkerHarness, lab_pg: LabDatabase, netns: Callable[[], Namespace]
) -> None:
    workers, ns = lab_workers, netns()
    with lab_app(lab_pg.url, workers.workdir) as (app, wf):
        procs = [
            workers.start(program=LAB_AGENT, concurrency=4),  # on the host
            workers.start(program=LAB_AGENT, concurrency=4, wrap=ns.wrap, url=lab_pg.url_in(ns)),
        ]
        handles = [
            app.start(wf["chain_agent"], LINKS, 0.02, workflow_id=f"rs-{i}") for i in range(RUNS)
        ]
        for restart in (1, 2):
            want = RUNS * LINKS * restart // 3

            def progressed(want: int = want) -> bool:
                return len(workers.executions()) >= want

            workers.wait_for(progressed, f"{want} links before restart {restart}", 120, procs)
            lab_pg.server.restart(mode="fast")

        for handle in handles:
            assert handle.result(timeout=180) == chain_expected(LINKS), workers.describe()
        for proc in procs:
            assert proc.poll() is None, workers.describe()  # reconnected, never gave up
            assert "unreachable" in workers.output(proc), workers.describe()
        for i in range(RUNS):
            done = Counter(
                e.seq for e in step_entries(app, f"rs-{i}", "link") if e.status == "completed"
            )
            assert len(done) == LINKS and max(done.values()) == 1, (i, done)
