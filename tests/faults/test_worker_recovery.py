"""SIGKILL a real ``app.serve()`` worker, start another one: the run continues where it was.

* a step's downstream effect is committed, then the worker dies before the journal knows: the
  restarted worker runs the step again with the same idempotency key and the downstream service
  (which dedups by that key) holds exactly one effect;
* a worker dies while its run waits for an approval: the approval sent afterwards (to a new
  worker, or while no worker runs at all) continues the run, and no step before the wait runs
  again;
* a worker dies halfway through a durable sleep: the new worker finishes the run when the sleep
  ends, not a lease later (a suspended run holds no lease).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fault_harness import WorkerHarness, completed_twice
from worker_agent import Downstream

import stalwart

pytestmark = pytest.mark.timeout(60)

LEASE_SECONDS = 30.0  # any wait for a lease to lapse would stand out


def interrupted(app: stalwart.Stalwart, workflow_id: str) -> list[Any]:
    """Journal entries that record an attempt interrupted by a crash."""
    return [
        e for e in app.journal(workflow_id) if e.error and e.error.startswith("AttemptInterrupted")
    ]


def test_side_effect_happens_once_when_the_worker_dies_after_the_call(
    workers: WorkerHarness,
) -> None:
    app, wf = workers.app()
    downstream = Downstream(workers.workdir / "downstream.db")
    first = workers.start(hang=["charge"], lease_seconds=LEASE_SECONDS)
    wid = "order-1"
    handle = app.start(wf["charge_agent"], "o-1", 4200, workflow_id=wid)

    workers.wait_for(workers.marker(wid, "charge").exists, "charge ran", 30, [first])
    assert len(downstream.charges()) == 1  # the effect is committed downstream...
    assert handle.status() == "running"  # ... and the journal does not know it yet
    workers.kill(first)

    restarted = time.monotonic()
    second = workers.start(lease_seconds=LEASE_SECONDS)
    result = handle.result(timeout=30)
    assert time.monotonic() - restarted < 10, "the run waited for the dead worker's lease"

    charges = downstream.charges()
    assert len(charges) == 1, charges  # exactly one effect downstream
    key, charge_id, order_id, amount = charges[0]
    assert (order_id, amount) == ("o-1", 4200)
    assert key.startswith(f"{wid}/"), key
    assert result == {
        "reservation": "res-o-1",
        "charge": charge_id,
        "receipt": f"receipt-for-{charge_id}",
    }

    # Both attempts called downstream, with the same idempotency key.
    calls = downstream.calls()
    assert [(c[0], c[3]) for c in calls] == [(key, first.pid), (key, second.pid)], calls
    attempts = [e for e in workers.executions(wid) if e["step"] == "charge"]
    assert [(e["attempt"], e["key"], e["pid"], e["charge_id"]) for e in attempts] == [
        (1, key, first.pid, charge_id),
        (2, key, second.pid, charge_id),
    ], attempts
    assert workers.counts(wid) == {"reserve": 1, "charge": 2, "receipt": 1}

    charge_entries = [e for e in app.journal(wid) if e.kind == "step" and e.name == "charge"]
    assert [(e.status, e.attempt) for e in charge_entries] == [("failed", 1), ("completed", 2)]
    assert [e.name for e in interrupted(app, wid)] == ["charge"]
    assert completed_twice(app, wid) == []


@pytest.mark.parametrize("when", ["after-restart", "while-no-worker-runs"])
def test_approval_wait_survives_a_worker_kill(workers: WorkerHarness, when: str) -> None:
    app, wf = workers.app()
    first = workers.start(lease_seconds=LEASE_SECONDS)
    wid = f"ticket-{when}"
    handle = app.start(wf["approval_agent"], "t-9", workflow_id=wid)

    def waiting() -> bool:
        pending = [a for a in app.approvals() if a.workflow_id == wid]
        return bool(pending) and handle.status() == "suspended"

    workers.wait_for(waiting, "the run waits for its approval", 30, [first])
    [request] = [a for a in app.approvals() if a.workflow_id == wid]
    assert request.subject == "refund t-9"
    assert request.details == {"draft": "draft-of-triaged-t-9"}
    assert workers.counts(wid) == {"triage": 1, "draft": 1}
    workers.kill(first)

    if when == "while-no-worker-runs":
        app.approve(wid, by="alice", reason="fine")
        workers.start(lease_seconds=LEASE_SECONDS)
    else:
        workers.start(lease_seconds=LEASE_SECONDS)
        time.sleep(0.3)  # the new worker has looked: the run still waits
        assert handle.status() == "suspended"
        assert workers.counts(wid) == {"triage": 1, "draft": 1}
        app.approve(wid, by="alice", reason="fine")

    assert handle.result(timeout=30) == {
        "approved": True,
        "by": "alice",
        "reason": "fine",
        "outcome": "sent draft-of-triaged-t-9",
    }
    assert workers.counts(wid) == {"triage": 1, "draft": 1, "act": 1}  # nothing re-executed
    assert [a for a in app.approvals() if a.workflow_id == wid] == []
    decided = [a for a in app.approvals(pending=False) if a.workflow_id == wid]
    assert [(a.decision.approved, a.decision.by) for a in decided if a.decision] == [
        (True, "alice")
    ]
    waits = [e for e in app.journal(wid) if e.kind == "approval"]
    assert [e.status for e in waits] == ["scheduled", "completed"], waits
    assert interrupted(app, wid) == []
    assert completed_twice(app, wid) == []


def test_durable_sleep_resumes_on_time_after_a_worker_kill(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    first = workers.start(lease_seconds=LEASE_SECONDS)
    wid = "sleeper"
    started = time.time()
    handle = app.start(wf["sleepy_agent"], 4.0, workflow_id=wid)

    workers.wait_for(lambda: handle.status() == "suspended", "the run sleeps", 10, [first])
    time.sleep(max(0.0, started + 2.0 - time.time()))
    workers.kill(first)
    restarted = time.time()
    workers.start(lease_seconds=LEASE_SECONDS)

    result = handle.result(timeout=30)
    finished = result["after"]  # when the step after the sleep ran, by the worker's clock
    assert finished - started >= 4.0, "the sleep ended early"
    # Due 4 s after the start; a wait for the killed worker's lease would end it after 32 s.
    # The bound leaves 6 s for the new worker's start and first look on a machine running
    # other tests beside this one.
    assert finished - started < 10.0, (
        f"the run finished {finished - started:.2f}s after its start, "
        f"{finished - restarted:.2f}s after the restart (a lease wait would be ~{LEASE_SECONDS}s)"
    )
    assert workers.counts(wid) == {"before_sleep": 1, "after_sleep": 1}
    sleeps = [e for e in app.journal(wid) if e.kind == "sleep"]
    assert [e.status for e in sleeps] == ["scheduled", "completed"], sleeps
    assert interrupted(app, wid) == []
    assert completed_twice(app, wid) == []
