"""SIGTERM is a graceful stop, not a crash.

A worker executing a long multi-step run gets SIGTERM: it lets the running step finish, gives
the run back at the next step boundary and exits 0 well within its bound (``lease_seconds``).
A new worker finishes the run, and the journal shows no interrupted attempt (a graceful stop
is not a recovery). Two known bugs are pinned with strict xfails: the next worker executes the
completed steps again, and a step that outlives the bound keeps the process alive past it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_harness import WorkerHarness, completed_twice
from worker_agent import chain_expected

pytestmark = pytest.mark.timeout(60)


def stop(workers: WorkerHarness, proc: subprocess.Popen[bytes], within: float) -> float:
    """SIGTERM ``proc``; it must exit 0 within ``within`` seconds. Returns how long it took."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=within + 10)
    except subprocess.TimeoutExpired:
        workers.dump_stacks()
        pytest.fail(f"the worker ignored SIGTERM for {within + 10}s\n{workers.describe()}")
    took = time.monotonic() - sent
    assert proc.returncode == 0, workers.describe()
    assert took < within, f"the worker took {took:.2f}s to stop (bound {within}s)"
    return took


class Handoff:
    """A long run stopped by SIGTERM in one worker and finished by another."""

    def __init__(self, workers: WorkerHarness, steps: int = 10, pause: float = 0.25) -> None:
        self.app, wf = workers.app()
        self.lease_seconds, self.steps, self.pause = 10.0, steps, pause
        self.wid = "long-run"
        self.first = workers.start(lease_seconds=self.lease_seconds)
        self.handle = self.app.start(wf["chain_agent"], steps, pause, workflow_id=self.wid)
        workers.wait_for(
            lambda: len(workers.executions(self.wid)) >= 3, "three steps ran", 30, [self.first]
        )
        self.took = stop(workers, self.first, within=self.lease_seconds)
        self.output = workers.output(self.first)
        self.status_after_stop = self.handle.status()
        self.ran_first = [e["i"] for e in workers.executions(self.wid)]
        self.second = workers.start(lease_seconds=self.lease_seconds)
        self.result = self.handle.result(timeout=30)
        self.executions = workers.executions(self.wid)
        self.journal = self.app.journal(self.wid)


def test_sigterm_gives_the_run_back_and_another_worker_finishes_it(
    workers: WorkerHarness,
) -> None:
    run = Handoff(workers)
    assert run.took < run.pause + 2.0, f"stopping took {run.took:.2f}s for a {run.pause}s step"
    assert '"status": "stopped"' in run.output  # serve() returned, the process exited 0
    assert run.status_after_stop == "pending"  # given back, not left to a lease or a recovery
    assert run.ran_first == list(range(len(run.ran_first))), run.ran_first
    assert len(run.ran_first) < run.steps, "the run finished before SIGTERM arrived"

    assert run.result == chain_expected(run.steps)
    assert {e["pid"] for e in run.executions} == {run.first.pid, run.second.pid}
    assert all(e["attempt"] == 1 for e in run.executions), run.executions
    interrupted = [e for e in run.journal if e.error and "AttemptInterrupted" in e.error]
    assert interrupted == [], "a graceful stop was journaled as a crash"
    assert [e for e in run.journal if e.kind == "step" and e.status != "completed"] == []
    resumed = [e for e in run.journal if e.kind == "run" and e.name == "resumed"]
    assert [e.output for e in resumed] == [None, None], resumed  # never 'recovered_from'


def test_sigterm_handoff_executes_no_completed_step_again(workers: WorkerHarness) -> None:
    run = Handoff(workers)
    assert run.result == chain_expected(run.steps)
    assert [e["i"] for e in run.executions] == list(range(run.steps)), [
        (e["i"], e["pid"]) for e in run.executions
    ]
    assert completed_twice(run.app, run.wid) == []


@pytest.mark.xfail(
    strict=True,
    reason="KNOWN LIMITATION of in-process app.serve(): when a step outlives the shutdown "
    "grace, the run is released and serve() returns, but Python cannot stop the thread still "
    "running the step, so the process lingers until the step ends. The CLI worker "
    "(stalwart worker) ends its process with os._exit after serve() returns; this test's "
    "worker script calls app.serve() itself",
)
def test_sigterm_exits_within_the_bound_when_a_step_outlives_it(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    lease_seconds, step_seconds = 2.0, 6.0
    first = workers.start(lease_seconds=lease_seconds)
    wid = "slow-step"
    handle = app.start(wf["chain_agent"], 2, step_seconds, workflow_id=wid)
    workers.wait_for(lambda: len(workers.executions(wid)) >= 1, "the step ran", 30, [first])

    sent = time.monotonic()
    first.send_signal(signal.SIGTERM)
    try:
        first.wait(timeout=lease_seconds + 1.5)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"the worker was still alive {time.monotonic() - sent:.1f}s after SIGTERM with a "
            f"shutdown bound of {lease_seconds}s (status {handle.status()!r})"
        )
    assert first.returncode == 0, workers.describe()
    assert "outlived the shutdown grace" in workers.output(first)
    workers.start(lease_seconds=lease_seconds)
    assert handle.result(timeout=30) == chain_expected(2)


SIGNAL_INSIDE_THE_LOOPS_LOCK = """
import logging
import signal
import stalwart
from stalwart.testing import runtime_of

logging.basicConfig(level=logging.INFO)
app = stalwart.Stalwart("sqlite:///worker.db")


@app.workflow
def idle() -> None:
    return None


wakeup = runtime_of(app).wakeup  # the Event the worker's loop clears and waits on
cleared = wakeup.clear


def clear_with_a_signal_inside() -> None:
    # SIGTERM lands while the loop holds the Event's (non-reentrant) lock, as it can at any
    # bytecode of Event.clear or Event.wait: the handler must not need that lock.
    with wakeup._cond:
        signal.raise_signal(signal.SIGTERM)
    cleared()


wakeup.clear = clear_with_a_signal_inside
wakeup.set()  # the loop's first look clears the nudge
app.serve()
print("stopped cleanly")
"""


def test_sigterm_landing_while_the_loop_holds_its_wakeup_lock_still_stops_the_worker(
    tmp_path: Path,
) -> None:
    """A signal handler runs between any two bytecodes of the main thread; one that set the
    wake-up Event deadlocked when the loop was inside that Event's lock (a worker that ignored
    SIGTERM for good, seen once in CI)."""
    script = tmp_path / "worker.py"
    script.write_text(SIGNAL_INSIDE_THE_LOOPS_LOCK)
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            check=False,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the worker deadlocked in its SIGTERM handler")
    assert done.returncode == 0, done.stderr
    assert "stopped cleanly" in done.stdout
    assert "SIGTERM received, stopping" in done.stderr


def test_after_sigterm_the_worker_says_what_it_waits_for_and_as_each_run_is_done(
    workers: WorkerHarness,
) -> None:
    """The wait after ``SIGTERM received, stopping`` is logged: which runs, at which step,
    the bound (``lease_seconds``), and each run as it is done. Only the lines are asserted,
    not how long anything took."""
    app, wf = workers.app()
    first = workers.start(lease_seconds=10.0)
    wids = ["slow-a", "slow-b"]
    for wid in wids:
        app.start(wf["chain_agent"], 4, 1.0, workflow_id=wid)
    workers.wait_for(
        lambda: all(workers.executions(wid) for wid in wids), "both runs in a step", 30, [first]
    )
    stop(workers, first, within=10.0)
    lines = workers.output(first).splitlines()

    def where(text: str) -> int:
        found = [i for i, line in enumerate(lines) if text in line]
        assert found, f"no line with {text!r} in:\n" + "\n".join(lines)
        return found[0]

    stopping = where("SIGTERM received, stopping")
    waiting = where("waiting up to 10s (lease_seconds) for 2 run(s)")
    assert stopping < waiting
    for wid in wids:
        assert f"{wid} (step link, seq " in lines[waiting], lines[waiting]
    done = sorted(where(f"run {wid} is off this worker") for wid in wids)
    assert waiting < done[0]
    assert "(1 left, at most " in lines[done[0]] and "(0 left, at most " in lines[done[1]]
    assert done[1] < where(": stopped")
