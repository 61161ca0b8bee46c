"""The command line of the small worker programs the fault tests start:

    python AGENT.py URL WORKDIR [--concurrency N] [--lease-seconds S] [--max-recoveries N]

``serve`` declares the agent's workflows on an app, touches ``WORKDIR/ready-PID`` and serves
until SIGTERM (SIGUSR1 dumps every thread's stack, for a stuck worker)."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stalwart

__all__ = ["serve"]


def serve(argv: list[str], declare: Callable[[stalwart.Stalwart], Any], doc: str | None) -> int:
    """Run one worker of the agent ``declare`` sets up; the process's exit code."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--max-recoveries", type=int, default=5)
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    with stalwart.Stalwart(
        opts.url, lease_seconds=opts.lease_seconds, max_recoveries=opts.max_recoveries
    ) as app:
        declare(app)
        (Path(opts.workdir) / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0
