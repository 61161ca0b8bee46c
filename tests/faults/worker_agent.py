"""The worker program of the worker crash tests: it declares the worker scenarios and serves.

    python worker_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] [--hang STEP ...]

It builds one app on ``URL`` with every workflow below, writes ``WORKDIR/ready-<pid>`` and calls
``app.serve()`` until SIGTERM/SIGINT (then exits 0) or until the test SIGKILLs it. The test
process declares the same workflows (``declare``) on its own app to start runs and read results.

Every step appends one JSON line to ``WORKDIR/executions.log`` when it actually executes (see
``crash_agent.Recorder``; here with the wall time and the step's input too). A step named by
``--hang`` then creates the marker ``WORKDIR/running-<WORKFLOW_ID>-<STEP>`` and sleeps until the
test kills the process: a worker started without ``--hang`` runs the same step to its end.

Two more side stores play the world outside the engine:

* ``WORKDIR/downstream.db``, a fake payment service that dedups charges and refunds by
  idempotency key and logs every call it receives (``Downstream``);
* ``WORKDIR/intervals.db``, where each ``link`` step records when it ran and in which process
  (``record_interval``), to check that no two workers ever execute one run at once.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from crash_agent import Recorder

import stalwart

__all__ = ["POISON_EXIT", "Downstream", "WorkerRecorder", "declare", "intervals", "main"]

SIDE_DB_TIMEOUT = 30.0
POISON_EXIT = 137  # how ``poison_pill`` ends its worker: os._exit(137), as an OOM kill reports


WorkerRecorder = Recorder  # the worker scenarios log the same lines


_ANCHORS: dict[Path, sqlite3.Connection] = {}


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to a side store shared by racing processes.

    SQLite answers "database is locked" at once, whatever the busy timeout, in three moments:
    while a fresh file switches to WAL, while the last connection to close cleans the WAL up,
    and while the first to open after a crash recovers it. So WAL is switched once (it is kept
    in the file), each process keeps one connection open for its lifetime (so closing never
    cleans up under another process), and opening retries those moments.
    """
    deadline = time.monotonic() + SIDE_DB_TIMEOUT
    while True:
        conn = sqlite3.connect(path, timeout=SIDE_DB_TIMEOUT, isolation_level=None)
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
                conn.close()
                continue
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            conn.close()
            time.sleep(0.01)
            continue
        if path not in _ANCHORS:
            _ANCHORS[path] = sqlite3.connect(path, check_same_thread=False)
        return conn


class Downstream:
    """A fake payment service in its own SQLite file: one charge per idempotency key.

    Every call is logged in ``calls``; the effect (a row of ``charges``) happens once per key,
    and a repeated call returns the first call's charge id.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _conn(self) -> sqlite3.Connection:
        conn = _connect(self.path)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, charge_id TEXT NOT NULL,"
            " order_id TEXT, amount INTEGER, pid INTEGER, at REAL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT,"
            " order_id TEXT, amount INTEGER, pid INTEGER, at REAL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS refunds (n INTEGER PRIMARY KEY AUTOINCREMENT,"
            " key TEXT UNIQUE NOT NULL, charge_id TEXT, pid INTEGER, at REAL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS refund_calls (n INTEGER PRIMARY KEY AUTOINCREMENT,"
            " key TEXT, charge_id TEXT, pid INTEGER, at REAL)"
        )
        return conn

    def charge(self, key: str, order_id: str, amount: int) -> str:
        conn = self._conn()
        try:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO calls (key, order_id, amount, pid, at) VALUES (?, ?, ?, ?, ?)",
                (key, order_id, amount, os.getpid(), now),
            )
            conn.execute(
                "INSERT OR IGNORE INTO charges VALUES (?, ?, ?, ?, ?, ?)",
                (key, f"ch-{uuid.uuid4().hex[:12]}", order_id, amount, os.getpid(), now),
            )
            (charge_id,) = conn.execute(
                "SELECT charge_id FROM charges WHERE key = ?", (key,)
            ).fetchone()
            conn.execute("COMMIT")
            return str(charge_id)
        finally:
            conn.close()

    def find(self, key: str) -> str | None:
        """The charge id of ``key``'s charge, or ``None``: a read, not a call (for ``verify``)."""
        conn = self._conn()
        try:
            row = conn.execute("SELECT charge_id FROM charges WHERE key = ?", (key,)).fetchone()
            return None if row is None else str(row[0])
        finally:
            conn.close()

    def refund(self, key: str, charge_id: str) -> None:
        """Undo a charge: every call is logged in ``refund_calls``; the refund itself (a row of
        ``refunds``) happens once per key, like a charge."""
        conn = self._conn()
        try:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO refund_calls (key, charge_id, pid, at) VALUES (?, ?, ?, ?)",
                (key, charge_id, os.getpid(), now),
            )
            conn.execute(
                "INSERT OR IGNORE INTO refunds (key, charge_id, pid, at) VALUES (?, ?, ?, ?)",
                (key, charge_id, os.getpid(), now),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()

    def refunds(self) -> list[tuple[Any, ...]]:
        """``(key, charge_id)`` of every refund, in the order they happened."""
        conn = self._conn()
        try:
            return conn.execute("SELECT key, charge_id FROM refunds ORDER BY n").fetchall()
        finally:
            conn.close()

    def refund_calls(self) -> list[tuple[Any, ...]]:
        """``(key, charge_id, pid)`` of every refund call received, in order."""
        conn = self._conn()
        try:
            query = "SELECT key, charge_id, pid FROM refund_calls ORDER BY n"
            return conn.execute(query).fetchall()
        finally:
            conn.close()

    def charges(self) -> list[tuple[Any, ...]]:
        conn = self._conn()
        try:
            return conn.execute("SELECT key, charge_id, order_id, amount FROM charges").fetchall()
        finally:
            conn.close()

    def calls(self) -> list[tuple[Any, ...]]:
        conn = self._conn()
        try:
            query = "SELECT key, order_id, amount, pid FROM calls ORDER BY n"
            return conn.execute(query).fetchall()
        finally:
            conn.close()


def _intervals_conn(workdir: Path) -> sqlite3.Connection:
    conn = _connect(workdir / "intervals.db")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS intervals (workflow_id TEXT, seq TEXT, pid INTEGER,"
        " start REAL, end REAL)"
    )
    return conn


def record_interval(workdir: Path, start: float, end: float) -> None:
    """Record that this process executed the current step from ``start`` to ``end``."""
    conn = _intervals_conn(workdir)
    try:
        key = stalwart.idempotency_key()
        conn.execute(
            "INSERT INTO intervals VALUES (?, ?, ?, ?, ?)",
            (stalwart.workflow_id(), key.rsplit("/", 1)[-1], os.getpid(), start, end),
        )
    finally:
        conn.close()


def intervals(workdir: Path) -> list[tuple[str, str, int, float, float]]:
    """Every recorded step interval: ``(workflow_id, seq, pid, start, end)``; ``seq`` is the
    call's replay position, the last part of its idempotency key."""
    if not (workdir / "intervals.db").exists():
        return []
    conn = _intervals_conn(workdir)
    try:
        return [tuple(row) for row in conn.execute("SELECT * FROM intervals")]  # type: ignore[misc]
    finally:
        conn.close()


def declare(app: stalwart.Stalwart, rec: WorkerRecorder) -> dict[str, Any]:
    """Declare every workflow of the worker scenarios on ``app``; returns them by name."""
    downstream = Downstream(rec.workdir / "downstream.db")

    # -- a side effect downstream, deduplicated by the idempotency key -----------------------

    @app.step(name="reserve")
    def reserve(order_id: str) -> str:
        rec.executed("reserve")
        return f"res-{order_id}"

    @app.step(name="charge")
    def charge(order_id: str, amount: int) -> str:
        key = stalwart.idempotency_key()
        charge_id = downstream.charge(key, order_id, amount)  # committed downstream
        rec.executed("charge", charge_id=charge_id)
        rec.hang_sync("charge")  # the effect happened; the journal does not know yet
        return charge_id

    @app.step(name="receipt")
    def receipt(charge_id: str) -> str:
        rec.executed("receipt")
        return f"receipt-for-{charge_id}"

    @app.workflow(name="charge_agent")
    def charge_agent(order_id: str, amount: int) -> dict[str, Any]:
        reservation = reserve(order_id)
        charge_id = charge(order_id, amount)
        return {"reservation": reservation, "charge": charge_id, "receipt": receipt(charge_id)}

    # -- an approval wait between steps ------------------------------------------------------

    @app.step(name="triage")
    def triage(ticket: str) -> str:
        rec.executed("triage")
        return f"triaged-{ticket}"

    @app.step(name="draft")
    def draft(triaged: str) -> str:
        rec.executed("draft")
        return f"draft-of-{triaged}"

    @app.step(name="act")
    def act(draft_text: str, approved: bool) -> str:
        rec.executed("act", approved=approved)
        return ("sent " if approved else "dropped ") + draft_text

    @app.workflow(name="approval_agent")
    def approval_agent(ticket: str) -> dict[str, Any]:
        text = draft(triage(ticket))
        decision = stalwart.request_approval(f"refund {ticket}", details={"draft": text})
        assert decision is not None  # no timeout: a decision always arrives
        return {
            "approved": decision.approved,
            "by": decision.by,
            "reason": decision.reason,
            "outcome": act(text, decision.approved),
        }

    # -- a durable timer -----------------------------------------------------------------

    @app.step(name="before_sleep")
    def before_sleep() -> float:
        rec.executed("before_sleep")
        return time.time()

    @app.step(name="after_sleep")
    def after_sleep() -> float:
        rec.executed("after_sleep")
        return time.time()

    @app.workflow(name="sleepy_agent")
    def sleepy_agent(seconds: float) -> dict[str, float]:
        began = before_sleep()
        stalwart.sleep(seconds)
        return {"before": began, "after": after_sleep()}

    # -- an event racing its timeout ----------------------------------------------------

    @app.step(name="after_race")
    def after_race(got: Any) -> Any:
        rec.executed("after_race", got=got)
        rec.hang_sync("after_race")
        return got

    @app.step(name="final_race")
    def final_race(got: Any) -> Any:
        rec.executed("final_race", got=got)
        rec.hang_sync("final_race")
        return got

    @app.workflow(name="race_agent")
    def race_agent(timeout: float) -> dict[str, Any]:
        got = stalwart.wait_for_event("x", timeout=timeout)
        return {"got": got, "after": after_race(got), "final": final_race(got)}

    # -- chains of short steps: takeovers, graceful stops, mutual exclusion ----------------

    @app.step(name="link")
    def link(i: int, v: int, pause: float) -> int:
        start = time.time()
        rec.executed("link", i=i)
        time.sleep(pause)
        record_interval(rec.workdir, start, time.time())
        return v * 2 + i

    @app.workflow(name="chain_agent")
    def chain_agent(n: int, pause: float, nap: float = 0.0) -> int:
        v = 1
        for i in range(n):
            if nap and i:
                stalwart.sleep(nap)  # suspend between links: any worker may continue the run
            v = link(i, v, pause)
        return v

    # -- many runs parked on an event ------------------------------------------------------

    @app.step(name="done")
    def done(payload: Any) -> Any:
        rec.executed("done")
        return payload

    @app.workflow(name="parked_agent")
    def parked_agent(tag: str) -> dict[str, Any]:
        return {"tag": tag, "payload": done(stalwart.wait_for_event("go"))}

    # -- a poison step: it ends its worker's process on every attempt ----------------------

    @app.step(name="warm_up")
    def warm_up(tag: str) -> str:
        rec.executed("warm_up")
        return f"warm-{tag}"

    # A budget far beyond max_recoveries: the crash loop must be stopped by the recoveries.
    @app.step(name="poison_pill", retry=stalwart.Retry(max_attempts=100, initial_delay=0))
    def poison_pill(warm: str) -> str:
        rec.executed("poison_pill")
        os._exit(POISON_EXIT)  # a hard crash: no exception, no cleanup, no finally

    @app.workflow(name="poison_agent")
    def poison_agent(tag: str) -> str:
        return poison_pill(warm_up(tag))

    # -- a dead-lettered run: a step fails while WORKDIR/broken-<WORKFLOW_ID> exists ---------

    @app.step(name="fetch_ticket")
    def fetch_ticket(ticket: str) -> dict[str, Any]:
        rec.executed("fetch_ticket")
        return {"ticket": ticket, "amount": 42}

    @app.step(name="classify")
    def classify(info: dict[str, Any]) -> str:
        rec.executed("classify")
        return "refund" if info["amount"] < 100 else "escalate"

    @app.step(name="file_refund", retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def file_refund(info: dict[str, Any], label: str) -> str:
        rec.executed("file_refund")
        if (rec.workdir / f"broken-{stalwart.workflow_id()}").exists():
            raise ConnectionError("refund API down")
        return f"{label}-{info['ticket']}-{info['amount']}"

    @app.step(name="notify_customer")
    def notify_customer(refund_id: str) -> str:
        rec.executed("notify_customer")
        return f"told customer about {refund_id}"

    @app.workflow(name="redrive_agent")
    def redrive_agent(ticket: str) -> dict[str, Any]:
        info = fetch_ticket(ticket)
        refund_id = file_refund(info, classify(info))
        return {"refund": refund_id, "notice": notify_customer(refund_id)}

    return {
        "poison_agent": poison_agent,
        "redrive_agent": redrive_agent,
        "charge_agent": charge_agent,
        "approval_agent": approval_agent,
        "sleepy_agent": sleepy_agent,
        "race_agent": race_agent,
        "chain_agent": chain_agent,
        "parked_agent": parked_agent,
    }


def chain_expected(n: int) -> int:
    """What ``chain_agent(n, ...)`` returns."""
    v = 1
    for i in range(n):
        v = v * 2 + i
    return v


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness dumps a stuck worker
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--hang", action="append", default=[])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--max-recoveries", type=int, default=5)
    opts = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(threadName)s %(message)s"
    )
    workdir = Path(opts.workdir)
    rec = WorkerRecorder(workdir, opts.hang)
    with stalwart.Stalwart(
        opts.url, lease_seconds=opts.lease_seconds, max_recoveries=opts.max_recoveries
    ) as app:
        declare(app, rec)
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    print(json.dumps({"status": "stopped", "pid": os.getpid()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
