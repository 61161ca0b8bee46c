"""Several real workers on one SQLite file.

* two workers share 30 runs; one is SIGKILLed midway: the other takes its runs over (at once:
  the dead holder is on this host), every run finishes, no step is completed twice;
* three workers race for batches of 60 runs that suspend between steps (so runs hop between
  workers): no two processes ever execute steps of one run at the same time;
* 300 runs suspended on an event in one worker hold no thread: the worker's OS thread count
  stays at its pool size plus a few, and all 300 finish once their events arrive.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from typing import Any

import pytest
from fault_harness import WorkerHarness, completed_twice
from worker_agent import chain_expected, intervals

pytestmark = pytest.mark.timeout(60)


def test_a_second_worker_takes_over_a_killed_workers_runs(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    runs, steps = 30, 6
    doomed = workers.start(concurrency=6)
    survivor = workers.start(concurrency=6)
    handles = [
        app.start(wf["chain_agent"], steps, 0.05, workflow_id=f"chain-{i}") for i in range(runs)
    ]

    def midway() -> bool:
        return sum(e["pid"] == doomed.pid for e in workers.executions()) >= 20

    workers.wait_for(midway, "the doomed worker executed 20 steps", 30, [doomed, survivor])
    workers.kill(doomed)
    killed = time.monotonic()

    for handle in handles:
        assert handle.result(timeout=40) == chain_expected(steps), handle.workflow_id
    assert time.monotonic() - killed < 20, "the takeover waited for the 30 s leases"
    assert survivor.poll() is None, workers.describe()

    taken_over = 0
    for handle in handles:
        wid = handle.workflow_id
        assert completed_twice(app, wid) == [], (wid, app.journal(wid))
        done = [e for e in app.journal(wid) if e.kind == "step" and e.status == "completed"]
        assert sorted(e.seq for e in done) == list(range(1, steps + 1)), (wid, done)
        pids = {e["pid"] for e in workers.executions(wid)}
        assert pids <= {doomed.pid, survivor.pid}
        taken_over += pids == {doomed.pid, survivor.pid}
        links = [e["i"] for e in workers.executions(wid)]
        assert sorted(set(links)) == list(range(steps)), (wid, links)
    assert taken_over >= 1, "no run was in the killed worker's hands when it died"


def test_no_two_workers_execute_one_run_at_once(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    rounds, runs, steps = 3, 60, 5
    handles = [
        app.start(wf["chain_agent"], steps, 0.02, 0.05, workflow_id=f"hop-0-{i}")
        for i in range(runs)
    ]
    procs = [workers.start(concurrency=4, ready=False) for _ in range(3)]  # all race at once
    for proc in procs:
        workers.wait_ready(proc)

    for round_ in range(rounds):
        if round_:  # the next batch arrives while all three workers are idle
            handles = [
                app.start(wf["chain_agent"], steps, 0.02, 0.05, workflow_id=f"hop-{round_}-{i}")
                for i in range(runs)
            ]
        for handle in handles:
            assert handle.result(timeout=40) == chain_expected(steps), handle.workflow_id
        assert_one_worker_at_a_time(app, workers, [h.workflow_id for h in handles], steps)
    assert all(proc.poll() is None for proc in procs), workers.describe()


def assert_one_worker_at_a_time(
    app: Any, workers: WorkerHarness, wids: list[str], steps: int
) -> None:
    """No run had steps of two processes running at once, and (with no crash) every step of
    every run executed exactly once."""
    by_run: dict[str, list[tuple[str, int, float, float]]] = defaultdict(list)
    for wid, seq, pid, start, end in intervals(workers.workdir):
        by_run[wid].append((seq, pid, start, end))
    hopped = 0
    for wid in wids:
        spans = sorted(by_run[wid], key=lambda span: span[2])
        for a, b in itertools.combinations(spans, 2):
            if a[1] != b[1]:
                assert a[3] <= b[2] or b[3] <= a[2], ("two workers at once", wid, a, b)
        assert len(spans) == steps and len({seq for seq, *_ in spans}) == steps, (
            "a step executed twice without a crash",
            wid,
            spans,
        )
        hopped += len({pid for _, pid, _, _ in spans}) > 1
        assert completed_twice(app, wid) == []
        interrupted = [e for e in app.journal(wid) if e.error]
        assert interrupted == [], ("an attempt was charged though no worker crashed", wid)
    assert hopped >= 1, "no run moved between workers: the race was not exercised"


def test_suspended_runs_hold_no_threads(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    runs, concurrency = 300, 4
    # A fixed number of threads beyond the run threads; PostgreSQL adds three of its own:
    # the connection pool's worker and scheduler, and the LISTEN thread.
    bound = concurrency + 6 + (3 if workers.url.startswith("postgresql") else 0)
    worker = workers.start(concurrency=concurrency)
    baseline = workers.threads(worker)
    handles = [app.start(wf["parked_agent"], f"n{i}", workflow_id=f"park-{i}") for i in range(runs)]

    peak = 0

    def all_suspended() -> bool:
        nonlocal peak
        peak = max(peak, workers.threads(worker))
        return len(app.list_workflows(status="suspended", limit=runs + 10)) == runs

    workers.wait_for(all_suspended, f"{runs} runs suspended", 40, [worker], interval=0.1)
    parked = workers.threads(worker)
    assert parked <= bound, (
        f"{parked} threads with {runs} suspended runs (baseline {baseline}, peak {peak})"
    )
    assert peak <= bound, f"peak of {peak} threads while runs suspended"
    assert workers.executions() == []  # the step after the wait never ran

    for i, handle in enumerate(handles):
        app.send_event(handle.workflow_id, "go", {"n": i})
    for i, handle in enumerate(handles):
        assert handle.result(timeout=40) == {"tag": f"n{i}", "payload": {"n": i}}
    assert workers.threads(worker) <= bound
    assert len(workers.executions()) == runs
