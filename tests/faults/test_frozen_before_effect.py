"""A worker frozen (SIGSTOP) past its lease inside an irreversible step, before its effect.

Another worker takes the run over once the lease lapses; ``verify`` finds no payment, so it
pays. The frozen worker, woken, calls ``stalwart.heartbeat()`` just before its own payment
(docs/reliability.md, the fencing limit): the heartbeat raises, as the lease is gone, so the
payment is made once, and the worker's log says the step may have had its effect late.
"""

from __future__ import annotations

import pytest
from fault_harness import WorkerHarness
from lab import pause, resume
from lab_agent import LAB_AGENT, lab_app, release
from worker_agent import Downstream

pytestmark = pytest.mark.timeout(90)

LEASE_S = 2.0


@pytest.mark.parametrize("fault_url", ["sqlite"], indirect=True)
def test_a_worker_frozen_before_its_effect_does_not_pay_again_after_a_heartbeat(
    workers: WorkerHarness,
) -> None:
    downstream = Downstream(workers.workdir / "downstream.db")
    with lab_app(workers.url, workers.workdir) as (app, wf):
        frozen = workers.start(program=LAB_AGENT, hang=["pay_fenced"], lease_seconds=LEASE_S)
        handle = app.start(wf["pay_fenced_agent"], "o-1", 40, workflow_id="frozen-1")
        marker = workers.marker("frozen-1", "pay_fenced")
        workers.wait_for(marker.exists, "pay_fenced held on the worker to freeze", 60, [frozen])
        pause(frozen)  # before the effect: a long GC, a suspended VM
        workers.start(program=LAB_AGENT, lease_seconds=LEASE_S)
        result = handle.result(timeout=60)
        assert len(downstream.calls()) == 1  # verify found nothing: the new holder paid

        resume(frozen)
        release(workers.workdir, "frozen-1")  # the woken worker goes on to its heartbeat
        workers.wait_for(
            lambda: "lease lost to another worker" in workers.output(frozen),
            "the woken worker to find its lease gone",
            60,
            [frozen],
        )
        output = workers.output(frozen)
        late = "step pay_fenced ran and may have had its effect after the lease was lost"
        assert late in output, output
        assert len(downstream.calls()) == 1, downstream.calls()  # the heartbeat stopped it
        assert len(downstream.charges()) == 1
        assert result["charge"] == downstream.charges()[0][1]
