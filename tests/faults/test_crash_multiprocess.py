"""Several processes on one SQLite file at once: every run completes, no lock error escapes.

Four processes start together (they wait for a go file, then open the fresh store at the same
moment) and each runs 20 workflows of 20 steps concurrently, one thread per workflow.
"""

from __future__ import annotations

import time

import pytest
from fault_harness import Harness

pytestmark = pytest.mark.timeout(60)

PROCESSES = 4
WORKFLOWS = 20
STEPS = 20


def test_four_processes_share_one_store(agent: Harness) -> None:
    go = agent.workdir / "go"
    args = ["--count", str(WORKFLOWS), "--steps", str(STEPS), "--go", str(go)]
    started = time.monotonic()
    procs = [agent.spawn("many", f"p{i}", extra=args) for i in range(PROCESSES)]
    time.sleep(0.3)  # let every interpreter start and import before the go signal
    go.touch()
    exits = [agent.finish(proc, started, timeout=50) for proc in procs]

    for exited in exits:
        assert exited.returncode == 0, exited.describe()
        output = (exited.stdout + exited.stderr).lower()
        assert "database is locked" not in output, exited.describe()
        assert "busy" not in output, exited.describe()
        assert "traceback" not in output, exited.describe()

    for i, exited in enumerate(exits):
        results = exited.outcome["results"]
        assert results == {f"p{i}-{n}": STEPS for n in range(WORKFLOWS)}

    with agent.app() as app:
        runs = app.list_workflows(limit=PROCESSES * WORKFLOWS + 10)
        assert len(runs) == PROCESSES * WORKFLOWS
        assert {r.status for r in runs} == {"completed"}
        for run in runs:
            entries = [e for e in app.journal(run.workflow_id) if e.kind == "step"]
            assert len(entries) == STEPS, (run.workflow_id, entries)
            assert {(e.status, e.attempt) for e in entries} == {("completed", 1)}
            assert sorted(e.seq for e in entries) == list(range(1, STEPS + 1))
            assert [e.output for e in entries] == list(range(1, STEPS + 1))
