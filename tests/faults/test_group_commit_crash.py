"""Group commit under SIGKILL: no acknowledged step is ever lost.

One worker executes 40 runs at once, so their step outcomes share transactions (the write
pipeline batches them); it is SIGKILLed in the middle, and a second worker finishes the runs.
Each ``link`` step takes the value the previous one returned and appends a line to the side
file (fsynced, in execution order) when it really executes: the effects downstream.

A step is acknowledged when the workflow moved on past it, that is, when the next link ran.
Had the pipeline acknowledged an outcome its transaction did not commit, the killed worker
would have run link ``i + 1`` and the new worker would run link ``i`` again after it. So for
every run, in the order the effects happened, a link never goes back to an earlier index; a
link runs again only when it was the last one the killed worker started (at most once per run);
and every journal holds each link completed exactly once, the chain's value right.
"""

from __future__ import annotations

from collections import Counter

import pytest
from fault_harness import WorkerHarness, completed_twice
from worker_agent import chain_expected

pytestmark = pytest.mark.timeout(90)

RUNS = 40
STEPS = 30


def test_a_killed_worker_loses_no_acknowledged_step(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    doomed = workers.start(concurrency=RUNS)
    handles = [
        app.start(wf["chain_agent"], STEPS, 0.0, workflow_id=f"group-{i}") for i in range(RUNS)
    ]

    def midway() -> bool:
        return len(workers.executions()) >= RUNS * STEPS // 3

    workers.wait_for(midway, "a third of the steps ran", 60, [doomed])
    workers.kill(doomed)
    before_kill = {(e["wid"], e["i"]) for e in workers.executions()}
    workers.start(concurrency=RUNS)

    for handle in handles:
        assert handle.result(timeout=60) == chain_expected(STEPS), handle.workflow_id

    interrupted = 0
    for handle in handles:
        wid = handle.workflow_id
        links = [e["i"] for e in workers.executions(wid)]
        highest = -1
        for i in links:
            assert i >= highest, f"{wid}: link {i} ran again after link {highest}: {links}"
            highest = i
        again = [i for i, n in Counter(links).items() if n > 1]
        assert len(again) <= 1, (wid, links)
        assert all((wid, i) in before_kill for i in again), (wid, links)
        assert sorted(set(links)) == list(range(STEPS)), (wid, links)
        assert completed_twice(app, wid) == [], (wid, app.journal(wid))
        done = [e for e in app.journal(wid) if e.kind == "step" and e.status == "completed"]
        assert sorted(e.seq for e in done) == list(range(1, STEPS + 1)), (wid, done)
        interrupted += 0 < sum((wid, i) in before_kill for i in range(STEPS)) < STEPS
    assert interrupted >= RUNS // 4, "too few runs were under way when the worker died"
