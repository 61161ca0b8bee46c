"""Child runs over a real fleet: a fan-out of 20 children over three worker processes, one of
them SIGKILLed midway, still charges each child's steps once (counted in a side store) and
completes the parent with every result; cancelling a parent cancels its waiting children, and
their compensations run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from child_agent import declare
from fault_harness import WorkerHarness, completed_twice

import stalwart

pytestmark = pytest.mark.timeout(120)
AGENT = Path(__file__).with_name("child_agent.py")


def test_a_fan_out_survives_a_killed_worker_with_each_effect_once(
    workers: WorkerHarness,
) -> None:
    n = 20
    procs = [workers.start(concurrency=3, program=AGENT) for _ in range(3)]
    with stalwart.Stalwart(workers.url) as app:
        wf = declare(app, workers.workdir)
        handle = app.start(wf["fan_parent"], n, 0.1, workflow_id="fan")

        def midway() -> bool:
            return len(workers.executions()) >= n // 2

        workers.wait_for(midway, f"{n // 2} charges", 60, procs)
        workers.kill(procs[0])
        assert handle.result(timeout=90) == [i * i for i in range(n)]

        children = app.list_workflows(parent_id="fan")
        assert sorted(c.workflow_id for c in children) == sorted(f"fan/{i}" for i in range(n))
        assert {c.status for c in children} == {"completed"}
        assert all(c.parent_id == "fan" for c in children)
        keys = Counter(key for key, *_ in wf["downstream"].charges())
        assert len(keys) == 2 * n and set(keys.values()) == {1}, keys
        for child in children:
            assert completed_twice(app, child.workflow_id) == [], child.workflow_id
        ran = {e["pid"] for e in workers.executions()}
        assert procs[0].pid in ran and len(ran) >= 2, "the fan-out did not spread over the workers"
    assert all(p.poll() is None for p in procs[1:]), workers.describe()


def test_cancelling_a_parent_cancels_its_children_and_runs_their_compensations(
    workers: WorkerHarness,
) -> None:
    n = 4
    procs = [workers.start(concurrency=2, program=AGENT) for _ in range(2)]
    with stalwart.Stalwart(workers.url) as app:
        wf = declare(app, workers.workdir)
        handle = app.start(wf["held_parent"], n, workflow_id="held")

        def all_waiting() -> bool:
            kids = app.list_workflows(parent_id="held")
            return len(kids) == n and all(k.status == "suspended" for k in kids)

        workers.wait_for(all_waiting, "every child waiting", 60, procs)
        app.cancel("held")

        def all_cancelled() -> bool:
            kids = app.list_workflows(parent_id="held")
            return all(k.status == "cancelled" for k in kids)

        workers.wait_for(all_cancelled, "every child cancelled", 60, procs)
        with pytest.raises(stalwart.WorkflowCancelled):
            handle.result(timeout=30)
        refunded = sorted(charge_id for _, charge_id in wf["downstream"].refunds())
        charged = sorted(row[1] for row in wf["downstream"].charges())
        assert refunded == charged and len(charged) == n
