"""The worker program of the schedule fleet test: it declares the scheduled workflow and serves.

    python schedule_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S]

It builds one app on ``URL`` declaring ``tick_job`` (``declare``), writes ``WORKDIR/ready-<pid>``
and calls ``app.serve()`` until SIGTERM/SIGINT (then exits 0). The schedules themselves are
declared by the test process, as any process of an app may: the workers find them in the store.
The job's one step appends a line to ``WORKDIR/executions.log`` when it really executes
(``crash_agent.Recorder``), so the test counts executions per tick.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from crash_agent import Recorder

import stalwart

__all__ = ["declare", "main"]


def declare(app: stalwart.Stalwart, rec: Recorder) -> Any:
    """The scheduled workflow, on ``app``."""

    @app.step(name="work")
    def work() -> str:
        rec.executed("work")
        return stalwart.workflow_id()

    @app.workflow(name="tick_job")
    def tick_job() -> str:
        return work()

    return tick_job


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness dumps a stuck worker
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    workdir = Path(opts.workdir)
    with stalwart.Stalwart(opts.url, lease_seconds=opts.lease_seconds) as app:
        declare(app, Recorder(workdir, []))
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
