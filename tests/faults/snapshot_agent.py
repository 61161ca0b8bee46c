"""A worker whose runs snapshot a workspace, and restore it in a later step.

    python snapshot_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

``move_workspace(src, name)`` takes a snapshot of the folder ``src`` (step ``take``), then
(step ``bring_back``) restores it to ``WORKDIR/restored-<name>`` on whatever worker runs that
step. With ``$SNAPSHOT_AGENT_HANG=take``, ``take`` creates ``WORKDIR/running-take`` once
it stored its first batch of chunks and blocks there (a worker killed in the middle of a
snapshot); with ``bring_back``, ``bring_back`` marks itself and blocks before restoring (a
worker killed after the snapshot was journaled). Each step appends a line to
``WORKDIR/executions.log``. The test process imports this module to declare the workflow too.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from crash_agent import HANG_SECONDS, Recorder
from worker_main import serve

import stalwart
from stalwart.testing import store_of

__all__ = ["HANG_ENV", "declare"]

HANG_ENV = "SNAPSHOT_AGENT_HANG"


def _hang_after_first_batch(app: stalwart.Stalwart, workdir: Path) -> None:
    """Block ``take`` once its first chunks are stored (the store's verb, wrapped; it runs
    on the snapshot's writer thread, which knows no run: the marker is ``running-take``)."""
    store = store_of(app)
    put = store.put_chunks

    def put_then_hang(*args: Any, **kwargs: Any) -> Any:
        wrote = put(*args, **kwargs)
        (workdir / "running-take").touch()
        time.sleep(HANG_SECONDS)
        return wrote

    store.put_chunks = put_then_hang  # type: ignore[method-assign]


def declare(app: stalwart.Stalwart, workdir: Path | None = None) -> Any:
    """The workflow (and its steps) on ``app``; with ``workdir``, steps log and may hang."""
    hang = [os.environ[HANG_ENV]] if os.environ.get(HANG_ENV) and workdir is not None else []
    recorder = Recorder(workdir, hang) if workdir is not None else None
    if workdir is not None and hang == ["take"]:
        _hang_after_first_batch(app, workdir)

    @app.step(name="take")
    def take(src: str) -> stalwart.SnapshotRef:
        if recorder is not None:
            recorder.executed("take")
        return stalwart.snapshot(src)

    @app.step(name="bring_back")
    def bring_back(ref: stalwart.SnapshotRef, name: str) -> str:
        assert workdir is not None
        if recorder is not None:
            recorder.executed("bring_back")
            recorder.hang_sync("bring_back")
        target = workdir / f"restored-{name}"
        stalwart.restore(ref, target)
        return str(target)

    @app.workflow(name="move_workspace")
    def move_workspace(src: str, name: str) -> str:
        return bring_back(take(src), name)

    return move_workspace


def main(argv: list[str]) -> int:
    """Serve this agent's workflow (see ``worker_main``)."""
    workdir = Path(argv[1])
    return serve(argv, lambda app: declare(app, workdir), __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
