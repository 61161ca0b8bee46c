"""Worker ids are short and readable, ``host-pid-suffix``, and name a worker the same way
everywhere: its log lines, ``app.workers()``, the holder of the run it executes, and the
journal of a run recovered after it was SIGKILLed. A restarted worker gets a new id."""

from __future__ import annotations

import re
import socket

from fault_harness import WorkerHarness

from stalwart.testing import store_of


def _id_pattern(pid: int) -> str:
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0])
    return rf"{re.escape(host)}-{pid}-[0-9a-f]{{4}}"


def test_one_short_id_names_a_worker_in_logs_workers_holders_and_the_journal(
    workers: WorkerHarness,
) -> None:
    app, wf = workers.app()
    first = workers.start(lease_seconds=5.0, hang=["charge"])
    handle = app.start(wf["charge_agent"], "o-1", 40, workflow_id="ids-1")
    workers.wait_for(workers.marker("ids-1", "charge").exists, "the charge running", 30, [first])
    (info,) = app.workers()
    assert re.fullmatch(_id_pattern(first.pid), info.id), info.id
    assert info.host == socket.gethostname() and info.pid == first.pid
    workers.wait_for(lambda: app.describe("ids-1").current is not None, "its step published", 30)
    current = app.describe("ids-1").current
    assert current is not None and current.holder == info.id
    held = store_of(app).get_run("ids-1")
    assert held is not None and held.lease_owner is not None
    assert held.lease_owner.endswith(f"/{info.id}#1"), held.lease_owner  # the machine first
    assert f"worker {info.id}: serving the store" in workers.output(first)

    workers.kill(first)
    second = workers.start(lease_seconds=5.0)
    assert handle.result(timeout=30)["charge"], workers.describe()
    resumed = [e for e in app.journal("ids-1") if e.kind == "run" and e.name == "resumed"]
    assert resumed[-1].output == {"recovered_from": info.id}
    assert f"run ids-1: taken over from {info.id}," in workers.output(second)
    ids = {w.id for w in app.workers() if w.pid == second.pid}
    assert len(ids) == 1 and info.id not in ids
    assert re.fullmatch(_id_pattern(second.pid), ids.pop())
