"""Failure paths across real crashes: a rollback killed midway, a poison run, a redrive.

* ``crash_agent.py trip``: three bookings, each charged downstream and compensated by a refund,
  then ``pay`` fails for good. The compensation of the hotel (the second-newest booking) refunds,
  creates its marker and sleeps; the test SIGKILLs the process there. A new process continues the
  rollback: every compensation completes once, newest first, and the run ends ``failed``.
* ``worker_agent.py poison_agent``: a step that ends its worker with ``os._exit(137)`` on every
  attempt, with an attempt budget far beyond ``max_recoveries=3``. The test keeps restarting
  workers; the run is failed with "crashed its worker 3 times" instead of crash-looping.
* ``worker_agent.py redrive_agent``: a step fails while a flag file exists, so the run fails
  (dead-letter). The test removes the flag, runs ``stalwart retry ID`` and a new worker finishes
  the run without executing the steps before the failed one again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable

import pytest
from fault_harness import FAILED_EXIT, Harness, WorkerHarness, cli, completed_twice, step_entries
from worker_agent import POISON_EXIT, Downstream

import stalwart

pytestmark = pytest.mark.timeout(60)


def undo(charge: tuple[str, str]) -> tuple[str, str]:
    """A compensation's idempotency key is its step's key followed by /undo."""
    key, charge_id = charge
    return f"{key}/undo", charge_id


BOOKINGS = ["flight", "hotel", "car"]  # booked in this order, so undone car, hotel, flight


@pytest.mark.parametrize(
    "kill_in",
    [
        "car",  # the newest booking's compensation: nothing is compensated yet
        "hotel",  # after the car's compensation was recorded: it must not be booked again
    ],
)
def test_a_rollback_killed_midway_continues_where_it_stopped(agent: Harness, kill_in: str) -> None:
    wid = f"trip-{kill_in}"
    downstream = Downstream(agent.workdir / "downstream.db")
    agent.crash("trip", wid, at=[f"undo_{kill_in}"])

    undo_order = BOOKINGS[::-1]  # car, hotel, flight
    done_before = undo_order[: undo_order.index(kill_in) + 1]  # refunded before the kill
    forward = [f"book_{kind}" for kind in BOOKINGS] + ["pay"]
    assert [e["step"] for e in agent.executions(wid)] == forward + [
        f"undo_{kind}" for kind in done_before
    ]
    charges = {order.split(":")[1]: (key, cid) for key, cid, order, _ in downstream.charges()}
    assert sorted(charges) == sorted(BOOKINGS)
    # The killed compensation's refund happened downstream; the journal does not know it.
    assert downstream.refunds() == [undo(charges[kind]) for kind in done_before]
    with agent.app() as app:
        assert app.handle(wid).status() == "running"
        done = [(e.name, e.status) for e in app.journal(wid) if e.kind == "compensation"]
        assert done == [(f"book_{kind}", "completed") for kind in done_before[:-1]]

    final = agent.run("trip", wid)
    assert final.returncode == FAILED_EXIT, final.describe()
    assert "card declined" in final.outcome["error"], final.outcome

    # No forward step ran again; every compensation started once (the killed one twice), newest
    # first overall.
    steps = [e["step"] for e in agent.executions(wid)]
    expected = [*forward, *(f"undo_{kind}" for kind in done_before), f"undo_{kill_in}"]
    expected += [f"undo_{kind}" for kind in undo_order[len(done_before) :]]
    assert steps == expected
    assert len(downstream.calls()) == 3  # one charge call per booking, ever
    # Each booking was refunded exactly once downstream (the refund is idempotent by the
    # step's key), newest first; only the killed compensation called twice.
    assert downstream.refunds() == [undo(charges[kind]) for kind in undo_order]
    calls = Counter(key for key, _cid, _pid in downstream.refund_calls())
    assert calls == {undo(charges[kind])[0]: 1 + (kind == kill_in) for kind in BOOKINGS}

    with agent.app() as app:
        assert app.handle(wid).status() == "failed"
        compensations = [
            (e.name, e.status, e.attempt) for e in app.journal(wid) if e.kind == "compensation"
        ]
        # The killed compensation's attempt is charged (counted like a step's) when the
        # rollback is recovered; it then completes as attempt 2.
        assert compensations == [
            row
            for kind in undo_order
            for row in (
                [(f"book_{kind}", "failed", 1), (f"book_{kind}", "completed", 2)]
                if kind == kill_in
                else [(f"book_{kind}", "completed", 1)]
            )
        ]
        for kind in BOOKINGS:
            entries = step_entries(app, wid, f"book_{kind}")
            assert [e.status for e in entries] == ["completed", "compensated"], (kind, entries)


def died_or_failed(proc: subprocess.Popen[bytes], handle: stalwart.Handle) -> Callable[[], bool]:
    """A condition: ``proc`` exited, or the run of ``handle`` failed."""
    return lambda: proc.poll() is not None or handle.status() == "failed"


def test_a_poison_step_is_failed_after_max_recoveries(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    wid = "poison-1"
    handle = app.start(wf["poison_agent"], "p", workflow_id=wid)

    deaths = 0
    for _ in range(6):
        proc = workers.start(max_recoveries=3, ready=False)
        workers.wait_for(died_or_failed(proc, handle), "the worker died or the run failed", 30)
        if proc.poll() is None:
            break  # this worker failed the run instead of running the poison step
        assert proc.returncode == POISON_EXIT, workers.describe()
        deaths += 1
    assert deaths == 3, f"{deaths} worker deaths\n{workers.describe()}"
    assert handle.status() == "failed"
    with pytest.raises(stalwart.WorkflowFailed, match="crashed its worker 3 times"):
        handle.result(timeout=5)
    [info] = app.list_workflows(status="failed")
    assert info.workflow_id == wid
    assert "crashed its worker 3 times" in (info.error or "")
    assert workers.counts(wid) == {"warm_up": 1, "poison_pill": 3}
    assert proc.poll() is None  # the last worker is alive and did not run the step
    pids = [e["pid"] for e in workers.executions(wid) if e["step"] == "poison_pill"]
    assert len(set(pids)) == 3  # one execution per dead worker
    assert completed_twice(app, wid) == []


def test_a_dead_lettered_run_is_redriven_by_the_cli_after_the_fix(
    workers: WorkerHarness,
) -> None:
    app, wf = workers.app()
    wid = "ticket-1"
    broken = workers.workdir / f"broken-{wid}"
    broken.touch()
    first = workers.start()
    handle = app.start(wf["redrive_agent"], "t-1", workflow_id=wid)
    with pytest.raises(stalwart.WorkflowFailed, match="refund API down"):
        handle.result(timeout=30)
    assert workers.counts(wid) == {"fetch_ticket": 1, "classify": 1, "file_refund": 2}
    listed = cli(workers.url, "ls", "--status", "failed", "--json", cwd=workers.workdir)
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["workflow_id"] for line in listed.stdout.splitlines()] == [wid]

    os.kill(first.pid, signal.SIGTERM)  # the failing worker is gone before the redrive
    assert first.wait(timeout=30) == 0, workers.describe()

    broken.unlink()  # the cause is fixed
    redriven = cli(workers.url, "retry", wid, "--by", "oncall", cwd=workers.workdir)
    assert redriven.returncode == 0, (redriven.stdout, redriven.stderr)
    assert f"retried {wid}" in redriven.stdout
    assert handle.status() == "pending"

    second = workers.start()
    result = handle.result(timeout=30)
    assert result == {"refund": "refund-t-1-42", "notice": "told customer about refund-t-1-42"}
    assert workers.counts(wid) == {
        "fetch_ticket": 1,
        "classify": 1,
        "file_refund": 3,
        "notify_customer": 1,
    }
    runs = [(e["step"], e["attempt"], e["pid"]) for e in workers.executions(wid)]
    assert runs == [
        ("fetch_ticket", 1, first.pid),
        ("classify", 1, first.pid),
        ("file_refund", 1, first.pid),
        ("file_refund", 2, first.pid),
        ("file_refund", 1, second.pid),  # a fresh attempt budget
        ("notify_customer", 1, second.pid),
    ]
    ops = [(e.name, e.by) for e in app.journal(wid) if e.kind == "operator"]
    assert ops == [("retry", "oncall")]
    assert completed_twice(app, wid) == []
