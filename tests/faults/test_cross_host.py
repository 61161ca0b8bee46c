"""A worker on another host dies: its run is taken over when its lease lapses, not before.

"Another host" is a worker in a process-id namespace of its own (``unshare --pid``): its lease
names a host this process cannot look into, as a worker on another machine does, so the
same-host shortcut (taking over at once from a holder whose process is gone) must not apply.
The kill is a real SIGKILL of that namespace's processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from fault_harness import WORKER_AGENT, Harness, WorkerHarness, completed_twice
from worker_agent import Downstream

from stalwart._leases import HOST, worker_of
from stalwart.testing import store_of

LEASE_S = 3.0


def _start_elsewhere(workers: WorkerHarness, *, hang: str) -> subprocess.Popen[bytes]:
    """A worker in a new pid namespace; killing the returned process kills all of it."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to give a worker a pid namespace of its own")
    cmd = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        "--kill-child",
        sys.executable,
        str(WORKER_AGENT),
        workers.url,
        str(workers.workdir),
        "--lease-seconds",
        str(LEASE_S),
        "--hang",
        hang,
    ]
    out = workers.workdir / "elsewhere.out"
    with out.open("wb") as sink:
        return subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=workers.workdir, env=Harness._env()
        )


def test_a_dead_workers_run_on_another_host_is_taken_over_once_its_lease_lapses(
    workers: WorkerHarness,
) -> None:
    app, wf = workers.app()
    downstream = Downstream(workers.workdir / "downstream.db")
    handle = app.start(wf["charge_agent"], "o-1", 40, workflow_id="far-1")
    elsewhere = _start_elsewhere(workers, hang="charge")
    try:
        workers.wait_for(
            workers.marker("far-1", "charge").exists, "the charge under way elsewhere", 30
        )
        held = store_of(app).get_run("far-1")
        assert held is not None and held.lease_owner is not None
        assert not held.lease_owner.startswith(HOST + "/"), "the worker was not on another host"
        local = workers.start(concurrency=2, lease_seconds=LEASE_S)
        elsewhere.send_signal(signal.SIGKILL)  # the whole namespace goes with it
        elsewhere.wait(timeout=10)

        assert handle.result(timeout=30)["charge"], workers.describe()
        resumed = [e for e in app.journal("far-1") if e.kind == "run" and e.name == "resumed"][-1]
        assert resumed.output == {"recovered_from": worker_of(held.lease_owner)}
        # Not at once: the local worker could not see that process, so it waited for the lease
        # (renewed every LEASE_S / 3 until the kill) to lapse.
        assert held.lease_expires_at is not None
        assert resumed.started_at is not None
        assert resumed.started_at.timestamp() >= held.lease_expires_at
        assert completed_twice(app, "far-1") == []
        assert len(downstream.charges()) == 1  # the retried charge reused its key
        assert local.poll() is None
    finally:
        if elsewhere.poll() is None:
            elsewhere.kill()
            elsewhere.wait()


def test_the_lease_of_a_worker_on_this_host_names_this_host() -> None:
    assert HOST.split("~")[0] == os.uname().nodename.replace("/", "_")
    assert "/" not in HOST
