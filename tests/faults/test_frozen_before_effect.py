"""A worker frozen (SIGSTOP) past its lease inside an irreversible step, before its effect.

Another worker takes the run over once the lease lapses; ``verify`` finds no payment, so it
pays. The frozen worker, woken, goes on with its step (docs/reliability.md, the fencing limit):

* with ``stalwart.heartbeat()`` just before the payment, the heartbeat raises, as the lease is
  gone: the payment service is called once;
* without it, the woken worker calls the service too, and only the service's deduplication on
  ``stalwart.idempotency_key()`` keeps it to one charge.

Either way the woken worker records nothing and logs that the step may have had its effect
after the lease was lost.
"""

from __future__ import annotations

import pytest
from fault_harness import WorkerHarness
from lab import pause, resume
from lab_agent import LAB_AGENT, lab_app, release
from worker_agent import Downstream

pytestmark = pytest.mark.timeout(90)

LEASE_S = 2.0


@pytest.mark.parametrize(
    ("step", "calls"), [("pay_fenced", 1), ("pay_unfenced", 2)], ids=["heartbeat", "no-heartbeat"]
)
@pytest.mark.parametrize("fault_url", ["sqlite"], indirect=True)
def test_a_worker_frozen_before_its_effect_is_stopped_by_a_heartbeat(
    workers: WorkerHarness, step: str, calls: int
) -> None:
    downstream = Downstream(workers.workdir / "downstream.db")
    with lab_app(workers.url, workers.workdir) as (app, wf):
        frozen = workers.start(program=LAB_AGENT, hang=[step], lease_seconds=LEASE_S)
        handle = app.start(wf[f"{step}_agent"], "o-1", 40, workflow_id="frozen-1")
        marker = workers.marker("frozen-1", step)
        workers.wait_for(marker.exists, f"{step} held on the worker to freeze", 60, [frozen])
        pause(frozen)  # before the effect: a long GC, a suspended VM
        workers.start(program=LAB_AGENT, lease_seconds=LEASE_S)
        result = handle.result(timeout=60)
        assert len(downstream.calls()) == 1  # verify found nothing: the new holder paid
        before = app.journal("frozen-1")

        resume(frozen)
        release(workers.workdir, "frozen-1")  # the woken worker goes on from where it froze
        workers.wait_for(
            lambda: "lease lost to another worker" in workers.output(frozen),
            "the woken worker to find its lease gone",
            60,
            [frozen],
        )
        output = workers.output(frozen)
        late = f"step {step} ran and may have had its effect after the lease was lost"
        assert late in output, output
        assert len(downstream.calls()) == calls, downstream.calls()
        assert len(downstream.charges()) == 1  # the service deduplicated a late call
        assert result["charge"] == downstream.charges()[0][1]
        assert app.journal("frozen-1") == before  # the woken worker recorded nothing
