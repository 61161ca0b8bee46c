"""A worker whose runs send events to another run, for the crash tests of ``send_event``.

    python message_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

``sender(target, n)`` sends event ``note`` with payload ``i`` to run ``target`` ``n`` times,
calling the step ``before(i)`` just before each send and ``after(i)`` just after it; each
step appends a line to ``WORKDIR/executions.log`` (``crash_agent.Recorder``). With
``$MESSAGE_AGENT_HANG`` set to ``"<workflow id>:<step>:<i>"`` that step creates the marker
``WORKDIR/running-<workflow id>-<step>`` and sleeps until the test kills the worker; with
``$MESSAGE_AGENT_PAUSE`` (seconds) every step takes that long, so a kill lands mid-run.
``inbox(n)`` collects ``n`` events ``note``. The test process imports this module to declare
the workflows too.
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

__all__ = ["HANG_ENV", "PAUSE_ENV", "declare"]

HANG_ENV = "MESSAGE_AGENT_HANG"
PAUSE_ENV = "MESSAGE_AGENT_PAUSE"


def declare(app: stalwart.Stalwart, workdir: Path | None = None) -> dict[str, Any]:
    """The workflows (and their steps) on ``app``; with ``workdir``, steps log and may hang."""
    hang = os.environ.get(HANG_ENV, "")
    pause = float(os.environ.get(PAUSE_ENV, "0"))

    def mark(step: str, i: int) -> None:
        if workdir is None:
            return
        chosen = hang == f"{stalwart.workflow_id()}:{step}:{i}"
        recorder = Recorder(workdir, [step] if chosen else [])
        recorder.executed(step, i=i)
        recorder.hang_sync(step)
        time.sleep(pause)

    @app.step(name="before")
    def before(i: int) -> None:
        mark("before", i)

    @app.step(name="after")
    def after(i: int) -> None:
        mark("after", i)

    @app.workflow(name="sender")
    def sender(target: str, n: int) -> list[bool]:
        sent = []
        for i in range(n):
            before(i)
            sent.append(stalwart.send_event(target, "note", i))
            after(i)
        return sent

    @app.workflow(name="inbox")
    def inbox(n: int) -> list[Any]:
        return [stalwart.wait_for_event("note") for _ in range(n)]

    return {"sender": sender, "inbox": inbox}


def main(argv: list[str]) -> int:
    """Serve this agent's workflows (see ``worker_main``)."""
    workdir = Path(argv[1])
    return serve(argv, lambda app: declare(app, workdir), __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
