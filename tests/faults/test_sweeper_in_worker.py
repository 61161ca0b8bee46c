"""A worker's retention sweeper, in a real worker process: while the worker serves live runs
(waiting for an event, then running a step), its sweeper deletes the ended runs past their
workflow's retention, round after round (runs that end while it serves too), and leaves the
runs it serves, the runs of workflows kept forever and the recent ones."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sweep_agent import RETENTION, declare

from stalwart.testing import store_of

AGENT = Path(__file__).with_name("sweep_agent.py")

pytestmark = pytest.mark.timeout(120)


def _until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def test_the_sweeper_prunes_expired_runs_while_the_worker_serves_live_ones(
    fault_url: str, tmp_path: Path
) -> None:
    app = declare(fault_url)
    with app:
        store = store_of(app)

        def ids(name: str) -> set[str]:
            rows = store.list_runs(status=None, name=name, limit=1000, before=None)
            return {row.workflow_id for row in rows}

        for i in range(5):
            assert app.run("kept", i, workflow_id=f"kept-{i}") == 2 * i
        for i in range(4):
            assert app.run("brief", i, workflow_id=f"old-{i}") == 2 * i
        ended = time.monotonic()  # the last brief run ends after this
        assert app.run("brief", 4, workflow_id="old-4") == 8
        ready = tmp_path / "ready"
        worker = subprocess.Popen(
            [sys.executable, str(AGENT), fault_url, str(ready)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _until(ready.exists, "the worker serves")
            for i in range(4):
                app.start("live", i, workflow_id=f"live-{i}")
            _until(lambda: not ids("brief"), "the sweeper deleted the expired runs")
            assert time.monotonic() - ended >= RETENTION  # not one before its retention
            # a run that ends while the worker serves goes one retention later
            assert app.run("brief", 7, workflow_id="new-7") == 14
            assert ids("brief") == {"new-7"}
            _until(lambda: not ids("brief"), "the sweeper deleted the run that ended later")
            for i in range(4):
                app.send_event(f"live-{i}", "go", {"n": i})
            for i in range(4):
                result = app.handle(f"live-{i}").result(timeout=60)
                assert result == {"doubled": 2 * i, "got": {"n": i}}
            assert ids("kept") == {f"kept-{i}" for i in range(5)}
            assert ids("live") == {f"live-{i}" for i in range(4)}  # no retention: kept
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                _, err = worker.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                _, err = worker.communicate()
        assert worker.returncode == 0, err
        assert "workflow brief) by retention" in err  # the worker's sweeper did it
