"""Partitions between one worker and PostgreSQL (the fault lab, ``lab.py``).

* A worker cut off from the database (or frozen with SIGSTOP) for longer than its lease while
  inside an irreversible step: another worker takes the run over once the lease lapses,
  ``verify`` settles the step (the effect happened), the healed worker records nothing, and the
  payment happened once.
* The acknowledgement of a commit lost (the server's ``COMMIT`` reply dropped, then the
  connection closed): the worker retries, the retried write is deduplicated, nothing is
  recorded twice and every run completes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from fault_harness import WorkerHarness, step_entries
from lab import LabDatabase, Namespace, pause, resume
from lab_agent import LAB_AGENT, lab_app, release
from worker_agent import Downstream, chain_expected

pytestmark = pytest.mark.faults

LEASE_S = 4.0


@pytest.mark.parametrize("fault", ["cut", "pause"])
def test_a_worker_partitioned_past_its_lease_in_an_irreversible_step_records_nothing(
    lab_workers: WorkerHarness, lab_pg: LabDatabase, netns: Callable[[], Namespace], fault: str
) -> None:
    workers, ns = lab_workers, netns()
    downstream = Downstream(workers.workdir / "downstream.db")
    with lab_app(lab_pg.url, workers.workdir) as (app, wf):
        cut_off = workers.start(
            program=LAB_AGENT,
            wrap=ns.wrap,
            url=lab_pg.url_in(ns),
            hang=["pay"],
            lease_seconds=LEASE_S,
        )
        handle = app.start(wf["pay_agent"], "o-1", 40, workflow_id="part-1")
        marker = workers.marker("part-1", "pay")
        workers.wait_for(marker.exists, "pay running on the worker to cut off", 60, [cut_off])
        if fault == "cut":
            ns.cut()
        else:
            pause(cut_off)  # frozen (SIGSTOP): a long GC, a suspended VM
        workers.start(program=LAB_AGENT, lease_seconds=LEASE_S)  # on the host, linked
        result = handle.result(timeout=120)
        charges = downstream.charges()
        assert len(charges) == 1, charges
        assert result["charge"] == charges[0][1]  # verify found the effect: not paid again
        assert len(downstream.calls()) == 1
        before = app.journal("part-1")

        if fault == "cut":
            ns.heal()
        else:
            resume(cut_off)
        release(workers.workdir, "part-1")  # the healed worker's step returns now
        workers.wait_for(
            lambda: "lease lost to another worker" in workers.output(cut_off),
            "the healed worker to find its lease gone",
            120,
            [cut_off],
        )
        assert app.journal("part-1") == before, workers.describe()  # it recorded nothing
        assert handle.status() == "completed"
        assert handle.result(timeout=5) == result
        assert len(downstream.charges()) == 1
        pays = [e for e in step_entries(app, "part-1", "pay") if e.status == "completed"]
        assert len(pays) == 1, pays


RUNS = 12
LINKS = 6


def test_a_lost_commit_acknowledgement_is_retried_and_recorded_once(
    lab_workers: WorkerHarness, lab_pg: LabDatabase, netns: Callable[[], Namespace]
) -> None:
    workers, ns = lab_workers, netns()
    with lab_app(lab_pg.url, workers.workdir) as (app, wf):
        worker = workers.start(program=LAB_AGENT, wrap=ns.wrap, url=lab_pg.url_in(ns))
        handles = [
            app.start(wf["chain_agent"], LINKS, 0.05, workflow_id=f"ack-{i}") for i in range(RUNS)
        ]
        workers.wait_for(
            lambda: len(workers.executions()) >= RUNS, "the first links to run", 60, [worker]
        )
        dropped = ns.drop_replies("COMMIT")
        workers.wait_for(lambda: dropped() > 0, "a COMMIT reply dropped", 60, [worker])
        ns.cut()  # ... and the connection it was on goes away: the acknowledgement is lost
        assert lab_pg.server.terminate(lab_pg.name) > 0
        ns.heal()

        for handle in handles:
            assert handle.result(timeout=120) == chain_expected(LINKS), workers.describe()
        assert "connection" in workers.output(worker).lower()  # it did notice the loss
        for i in range(RUNS):
            wid = f"ack-{i}"
            done = Counter(e.seq for e in step_entries(app, wid, "link") if e.status == "completed")
            assert len(done) == LINKS and max(done.values()) == 1, (wid, done)  # none twice
            ran = Counter(line["i"] for line in workers.executions(wid))
            assert max(ran.values()) == 1, (wid, ran)  # a landed commit is not done again
