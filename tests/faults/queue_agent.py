"""The worker program of the queue fleet tests: it declares two limited queues and serves.

    python queue_agent.py URL WORKDIR [--concurrency N]

It builds one app on ``URL`` declaring ``llm`` (at most 2 runs at once) and ``quota`` (at most
10 starts a second), with one workflow on each (``declare``), writes ``WORKDIR/ready-<pid>``
and calls ``app.serve()`` until SIGTERM/SIGINT (then exits 0) or until the test kills it. The
test process declares the same app on its own side to start runs and read results.

Each step records ``(pid, workflow_id, step, start, end)`` — wall-clock times taken inside the
step — in ``WORKDIR/queue_steps.db`` (SQLite, WAL, long busy timeout), so the test observes
the limits from where the work happens, not from the store that enforces them.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import stalwart

__all__ = ["LLM_CONCURRENCY", "QUOTA_PERIOD", "QUOTA_RATE", "StepRecord", "declare", "records"]

LLM_CONCURRENCY = 2
QUOTA_RATE = 10
QUOTA_PERIOD = 1.0
SIDE_DB = "queue_steps.db"
SIDE_DB_TIMEOUT = 30.0


class StepRecord(NamedTuple):
    """One step execution as the step itself saw it."""

    pid: int
    workflow_id: str
    step: str
    start: float
    end: float


def _connect(workdir: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(workdir / SIDE_DB, timeout=SIDE_DB_TIMEOUT, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS steps (pid INTEGER, workflow_id TEXT, step TEXT,"
        " start REAL, end REAL)"
    )
    return conn


def _record(workdir: Path, step: str, start: float, end: float) -> None:
    conn = _connect(workdir)
    try:
        conn.execute(
            "INSERT INTO steps VALUES (?, ?, ?, ?, ?)",
            (os.getpid(), stalwart.workflow_id(), step, start, end),
        )
    finally:
        conn.close()


def records(workdir: Path, step: str | None = None) -> list[StepRecord]:
    """Every recorded step execution (of ``step`` only, if given), by start time."""
    if not (workdir / SIDE_DB).exists():
        return []
    conn = _connect(workdir)
    try:
        rows = conn.execute("SELECT * FROM steps ORDER BY start").fetchall()
    finally:
        conn.close()
    return [r for r in (StepRecord(*row) for row in rows) if step is None or r.step == step]


def declare(app: stalwart.Stalwart, workdir: Path) -> dict[str, Any]:
    """Declare the queues and the workflows of the queue scenarios on ``app``."""
    app.queue("llm", concurrency=LLM_CONCURRENCY)
    app.queue("quota", rate=QUOTA_RATE, period=QUOTA_PERIOD)

    @app.step(name="call_llm")
    def call_llm(i: int, pause: float) -> int:
        start = time.time()
        time.sleep(pause)  # the provider is busy with this call
        _record(workdir, "call_llm", start, time.time())
        return i

    @app.workflow(name="llm_agent", queue="llm")
    def llm_agent(i: int, pause: float) -> int:
        return call_llm(i, pause)

    @app.step(name="call_quota")
    def call_quota(i: int) -> int:
        start = time.time()  # the first thing the run does: when it started, as seen from here
        _record(workdir, "call_quota", start, time.time())
        return i

    @app.step(name="after_quota")
    def after_quota(i: int) -> int:
        return i + 1

    @app.workflow(name="quota_agent", queue="quota")
    def quota_agent(i: int) -> int:
        return after_quota(call_quota(i))

    return {"llm_agent": llm_agent, "quota_agent": quota_agent}


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test dumps a stuck worker
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=8)
    opts = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(threadName)s %(message)s"
    )
    workdir = Path(opts.workdir)
    with stalwart.Stalwart(opts.url) as app:
        declare(app, workdir)
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    print(f"stopped {os.getpid()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
