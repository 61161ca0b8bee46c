"""The disk under a SQLite store fills up in the middle of a step (the fault lab's small tmpfs).

The step's result cannot be written: the worker says so in one line that names where to free
space, writes nothing half-way, loses nothing recorded before, and keeps the result to write:
once space returns (the disk stays full past the worker's lease) the run completes on its
own, the step run once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from fault_harness import WorkerHarness, step_entries
from lab import SmallDisk
from lab_agent import LAB_AGENT, lab_app, release

pytestmark = pytest.mark.faults

FULL = "the disk is full"
LEASE_S = 3.0


def test_a_full_disk_mid_step_loses_nothing_and_the_run_completes_once_space_returns(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    url = f"sqlite:///{small_disk.path / 'runs.db'}"
    workers = WorkerHarness(tmp_path, url)  # its side files live outside the small disk
    try:
        with lab_app(url, workers.workdir) as (app, wf):
            worker = workers.start(program=LAB_AGENT, hang=["slow_link"], lease_seconds=LEASE_S)
            handle = app.start(wf["slow_chain"], 3, 0.0, workflow_id="disk-1")
            marker = workers.marker("disk-1", "slow_link")
            workers.wait_for(marker.exists, "the step running", 60, [worker])
            before = app.journal("disk-1")
            small_disk.fill()
            release(workers.workdir, "disk-1")  # the step returns: its result meets a full disk
            workers.wait_for(
                lambda: FULL in workers.output(worker), "the full disk reported", 60, [worker]
            )
            assert app.journal("disk-1") == before  # nothing half-written
            assert handle.status() == "running"
            time.sleep(LEASE_S * 2)  # the disk stays full past the lease: a duration, not a wait
            small_disk.free()
            assert handle.result(timeout=60) == 3, workers.describe()

            output = workers.output(worker)
            lines = [line for line in output.splitlines() if FULL in line]
            assert len(lines) <= 2, output  # once, not once per write or beat (room may come
            # back for a moment as SQLite gives pages back: then once more)
            assert all(f"free space in {small_disk.path}" in line for line in lines), lines
            assert "Traceback" not in output, output
            assert app.journal("disk-1")[: len(before)] == before  # nothing recorded was lost
            ran = Counter(line["i"] for line in workers.executions("disk-1"))
            assert ran == {0: 1, 1: 1, 2: 1}, ran  # the result was kept, not the step redone
            attempts = [e.attempt for e in step_entries(app, "disk-1", "slow_link")]
            assert set(attempts) == {1}, attempts
    finally:
        workers.close()
