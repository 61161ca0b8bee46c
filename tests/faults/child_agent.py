"""The worker program of the child-run crash tests: it declares parents and children, serves.

    python child_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S]

Like ``worker_agent.py`` it writes ``WORKDIR/ready-<pid>`` and serves until killed. Each child
step charges the fake payment service of ``worker_agent.Downstream`` (``WORKDIR/downstream.db``)
under its idempotency key, so the side store counts effects: one charge per key, however often
a crash made a step run again (every call is logged too); a compensation refunds its charge.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from crash_agent import Recorder
from worker_agent import Downstream

import stalwart

__all__ = ["declare", "main"]


def declare(app: stalwart.Stalwart, workdir: Path) -> dict[str, Any]:
    """The workflows of the child-run scenarios, declared on ``app``."""
    rec = Recorder(workdir, [])
    downstream = Downstream(workdir / "downstream.db")

    def refund(charge_id: str, label: str, i: int) -> None:
        downstream.refund(stalwart.idempotency_key(), charge_id)

    @app.step(compensate=refund)
    def charge(label: str, i: int) -> str:
        rec.executed("charge", label=label, i=i)
        return downstream.charge(stalwart.idempotency_key(), stalwart.workflow_id(), i)

    @app.step()
    def pause(seconds: float) -> None:
        time.sleep(seconds)

    @app.workflow()
    def fan_child(i: int, delay: float) -> int:
        charge("a", i)
        pause(delay)
        charge("b", i)
        return i * i

    @app.workflow()
    def fan_parent(n: int, delay: float) -> list[int]:
        handles = [stalwart.start_child(fan_child, i, delay) for i in range(n)]
        return [h.result() for h in handles]

    @app.workflow()
    def held_child(i: int) -> int:
        charge("held", i)
        stalwart.sleep(3600)
        return i

    @app.workflow()
    def held_parent(n: int) -> list[int]:
        handles = [stalwart.start_child(held_child, i) for i in range(n)]
        return [h.result() for h in handles]

    return {
        "fan_parent": fan_parent,
        "fan_child": fan_child,
        "held_parent": held_parent,
        "held_child": held_child,
        "downstream": downstream,
    }


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--hang", action="append", default=[])
    parser.add_argument("--max-recoveries", type=int, default=5)
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    workdir = Path(opts.workdir)
    with stalwart.Stalwart(opts.url, lease_seconds=opts.lease_seconds) as app:
        declare(app, workdir)
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
