"""A worker whose runs race to increment one shared key by compare-and-set.

    python shared_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

Each run of ``shared_increments(key, n)`` adds 1 to the shared ``key`` ``n`` times, each time
with the compare-and-set retry loop (read, write ``if_version`` the version read, read again
when another writer moved it), then calls the step ``wrote(i)``, which appends a line to
``WORKDIR/executions.log`` (``crash_agent.Recorder``). With ``$SHARED_AGENT_HANG`` set to
``"<workflow id>:<i>"``, that run's ``wrote(i)`` creates the marker
``WORKDIR/running-<workflow id>-wrote`` and sleeps until the test kills the worker: right
after a write committed; with ``$SHARED_AGENT_PAUSE`` (seconds) every ``wrote`` takes that
long, so a race lasts long enough to kill a worker in the middle of it. The test process
imports this module to declare the workflow too.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from crash_agent import Recorder
from worker_main import serve

import stalwart

__all__ = ["HANG_ENV", "PAUSE_ENV", "WORKFLOW", "declare"]

WORKFLOW = "shared_increments"
HANG_ENV = "SHARED_AGENT_HANG"
PAUSE_ENV = "SHARED_AGENT_PAUSE"


def declare(app: stalwart.Stalwart, workdir: Path | None = None) -> Any:
    """The workflow (and its step) on ``app``; with ``workdir``, steps log and may hang."""
    hang = os.environ.get(HANG_ENV, "")
    pause = float(os.environ.get(PAUSE_ENV, "0"))

    @app.step(name="wrote")
    def wrote(i: int) -> None:
        if workdir is None:
            return
        recorder = Recorder(workdir, ["wrote"] if hang == f"{stalwart.workflow_id()}:{i}" else [])
        recorder.executed("wrote", i=i)
        recorder.hang_sync("wrote")
        time.sleep(pause)

    @app.workflow(name=WORKFLOW)
    def shared_increments(key: str, n: int) -> int:
        lost = 0
        for i in range(n):
            while True:
                current = stalwart.shared_get(key)
                if stalwart.shared_set(key, (current.value or 0) + 1, if_version=current.version):
                    break
                lost += 1  # another run wrote since the read: read again
            wrote(i)
        return lost

    return shared_increments


def main(argv: list[str]) -> int:
    """Serve this agent's workflow (see ``worker_main``)."""
    workdir = Path(argv[1])
    return serve(argv, lambda app: declare(app, workdir), __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
