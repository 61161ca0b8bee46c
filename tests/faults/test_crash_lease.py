"""A rerun takes over the lease of a SIGKILLed holder at once, not when the lease lapses.

The apps use ``lease_seconds=30``; the bounds below are bounds on waiting for a lease, not
performance claims (an unhindered rerun takes well under a second).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from fault_harness import Harness

pytestmark = pytest.mark.timeout(60)

LEASE_SECONDS = 30.0
TAKEOVER_BOUND_S = 15.0


@pytest.mark.parametrize("scenario", ["sync", "async"])
def test_rerun_takes_over_the_dead_holders_lease_at_once(agent: Harness, scenario: str) -> None:
    wid = f"lease-{scenario}"
    step = "s3" if scenario == "sync" else "left"
    agent.crash(scenario, wid, at=[step], lease_seconds=LEASE_SECONDS)
    killed_at = time.monotonic()

    with agent.app() as app:
        assert app.handle(wid).status() == "running"  # the dead process still holds the lease

    rerun = agent.run(scenario, wid, lease_seconds=LEASE_SECONDS)
    assert rerun.returncode == 0, rerun.describe()
    assert rerun.elapsed < TAKEOVER_BOUND_S, f"the rerun waited {rerun.elapsed:.1f}s"
    assert time.monotonic() - killed_at < LEASE_SECONDS  # the lease cannot have lapsed

    with agent.app() as app:
        assert app.handle(wid).status() == "completed"
        lifecycle = [(e.name, e.status) for e in app.journal(wid) if e.kind == "run"]
    assert [name for name, _ in lifecycle] == ["started", "resumed", "finished"]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_rerun_takes_over_from_a_killed_holder_not_yet_reaped(agent: Harness) -> None:
    # A killed process stays a zombie until its parent reaps it (or forever, under a PID 1
    # that never reaps): it still answers kill(pid, 0) and keeps its /proc start time.
    wid = "lease-zombie"
    proc = agent.spawn("sync", wid, hang=["s3"], lease_seconds=LEASE_SECONDS)
    agent.wait_until_running(proc, wid, ["s3"])
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not _is_zombie(proc.pid):  # dead, but deliberately not reaped yet
        assert time.monotonic() < deadline, "the killed agent did not die"
        time.sleep(0.005)

    started = time.monotonic()
    rerun = agent.spawn("sync", wid, lease_seconds=LEASE_SECONDS)
    try:
        exited = agent.finish(rerun, started, timeout=6.0)
    except pytest.fail.Exception:
        raise AssertionError(
            "the rerun was still waiting for the dead (zombie) holder's lease after 6s"
        ) from None
    finally:
        proc.communicate()  # reap the zombie
    assert exited.returncode == 0, exited.describe()
