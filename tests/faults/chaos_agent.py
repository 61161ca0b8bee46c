"""The worker program of the fleet chaos test: one worker of a fleet that a killer SIGKILLs.

    python chaos_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S]

It declares ``chaos_run(n, pause)``, a workflow of ten steps: eight cheap ``hop`` steps, one
``deposit`` with an idempotent effect downstream and one irreversible ``send`` with ``verify``.
Then it writes ``WORKDIR/ready-<PID>`` and serves until it is killed (or SIGTERMed).

Two side stores, SQLite files in WAL mode that every worker of the fleet shares, play the world
outside the engine:

* ``WORKDIR/downstream.db`` (``Downstream``) is the service the effects land in. ``deposit`` is
  idempotent: every call is logged in ``deposit_calls``, the effect (a row of ``deposits``)
  happens once per idempotency key. ``send`` is not: every call is a new row of ``messages``,
  so a second call for one key would be a second message. ``find_message`` reads the messages
  by key, for ``verify``.
* ``WORKDIR/trace.db`` (``Trace``) records every execution of a step (and of ``verify``): a row
  with the run, the step's replay position, the process and its start time is inserted when the
  execution begins and gets its end time when it ends. A killed process leaves its row open.
  ``verifies`` records what each ``verify`` call found.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import stalwart

__all__ = [
    "DEPOSIT_AT",
    "SEND_AT",
    "STEPS",
    "Downstream",
    "Span",
    "Trace",
    "chain_value",
    "declare",
    "main",
]

STEPS = 10  # steps per run
DEPOSIT_AT, SEND_AT = 4, 7  # the step indexes (0-based) of the two effects; the rest are hops
SIDE_DB_TIMEOUT = 30.0
# A crash charges an attempt to the step it interrupted (``AttemptInterrupted``). Under a
# killer, one step of one run may be interrupted more than the default three times in a rare
# unlucky streak; the attempt budget is not what this test is about, so it is generous.
RETRY = stalwart.Retry(max_attempts=20, initial_delay=0.01, max_delay=0.1)

Span = tuple[str, int, str, int, float, float | None]  # wid, seq, what, pid, start, end


class _SideDB:
    """One SQLite file shared by the fleet; a connection per thread."""

    def __init__(self, path: Path, schema: tuple[str, ...]) -> None:
        self.path = path
        self.schema = schema
        self._local = threading.local()

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=SIDE_DB_TIMEOUT, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # A committed transaction survives a SIGKILL of its process with NORMAL in WAL
            # mode; only a power cut could lose it.
            conn.execute("PRAGMA synchronous=NORMAL")
            for statement in self.schema:
                conn.execute(statement)
            self._local.conn = conn
        return conn


class Downstream:
    """The service the effects land in (see the module docstring)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS deposits (key TEXT PRIMARY KEY, workflow_id TEXT NOT NULL,"
        " deposit_id TEXT NOT NULL, pid INTEGER, at REAL)",
        "CREATE TABLE IF NOT EXISTS deposit_calls (n INTEGER PRIMARY KEY AUTOINCREMENT,"
        " key TEXT, workflow_id TEXT, pid INTEGER, at REAL)",
        "CREATE TABLE IF NOT EXISTS messages (n INTEGER PRIMARY KEY AUTOINCREMENT,"
        " key TEXT NOT NULL, workflow_id TEXT NOT NULL, pid INTEGER, at REAL)",
        "CREATE INDEX IF NOT EXISTS messages_key ON messages (key)",
    )

    def __init__(self, path: Path) -> None:
        self.db = _SideDB(path, self.SCHEMA)

    def deposit(self, key: str, workflow_id: str, n: int) -> str:
        """Idempotent: the first call for ``key`` makes the deposit, every call returns its id."""
        conn = self.db.conn()
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO deposit_calls (key, workflow_id, pid, at) VALUES (?, ?, ?, ?)",
                (key, workflow_id, os.getpid(), now),
            )
            conn.execute(
                "INSERT OR IGNORE INTO deposits VALUES (?, ?, ?, ?, ?)",
                (key, workflow_id, f"dep-{n}-{os.getpid()}-{now:.6f}", os.getpid(), now),
            )
            (deposit_id,) = conn.execute(
                "SELECT deposit_id FROM deposits WHERE key = ?", (key,)
            ).fetchone()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return str(deposit_id)

    def send(self, key: str, workflow_id: str) -> str:
        """Not idempotent: every call sends a new message; returns its id."""
        cur = self.db.conn().execute(
            "INSERT INTO messages (key, workflow_id, pid, at) VALUES (?, ?, ?, ?)",
            (key, workflow_id, os.getpid(), time.time()),
        )
        return f"msg-{cur.lastrowid}"

    def find_message(self, key: str) -> str | None:
        """The id of the first message sent with ``key``, or ``None``: a read, not a call."""
        row = (
            self.db.conn()
            .execute("SELECT n FROM messages WHERE key = ? ORDER BY n LIMIT 1", (key,))
            .fetchone()
        )
        return None if row is None else f"msg-{row[0]}"

    # -- the test's side ------------------------------------------------------------------

    def deposits(self) -> list[tuple[str, str, str]]:
        """``(key, workflow_id, deposit_id)`` of every deposit made."""
        rows = self.db.conn().execute("SELECT key, workflow_id, deposit_id FROM deposits")
        return [(str(k), str(w), str(d)) for k, w, d in rows]

    def deposit_calls(self) -> list[tuple[str, str, int]]:
        """``(key, workflow_id, pid)`` of every deposit call received, in order."""
        rows = self.db.conn().execute("SELECT key, workflow_id, pid FROM deposit_calls ORDER BY n")
        return [(str(k), str(w), int(p)) for k, w, p in rows]

    def messages(self) -> list[tuple[str, str, str, int]]:
        """``(message_id, key, workflow_id, pid)`` of every send call received, in order."""
        rows = self.db.conn().execute("SELECT n, key, workflow_id, pid FROM messages ORDER BY n")
        return [(f"msg-{n}", str(k), str(w), int(p)) for n, k, w, p in rows]


class Trace:
    """Every execution of a step or ``verify`` by the fleet (see the module docstring)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS spans (n INTEGER PRIMARY KEY AUTOINCREMENT,"
        " workflow_id TEXT NOT NULL, seq INTEGER NOT NULL, what TEXT NOT NULL,"
        " pid INTEGER NOT NULL, start REAL NOT NULL, end REAL)",
        "CREATE TABLE IF NOT EXISTS verifies (workflow_id TEXT, seq INTEGER, pid INTEGER,"
        " found TEXT, at REAL)",
    )

    def __init__(self, path: Path) -> None:
        self.db = _SideDB(path, self.SCHEMA)

    @staticmethod
    def _where() -> tuple[str, int]:
        """The current run and the step call's replay position (the key's last part)."""
        return stalwart.workflow_id(), int(stalwart.idempotency_key().rsplit("/", 1)[-1])

    @contextmanager
    def executing(self, what: str) -> Iterator[None]:
        """Record this process executing ``what`` of the current step call, from now until the
        block ends; a process killed meanwhile leaves the span open (``end`` NULL)."""
        wid, seq = self._where()
        conn = self.db.conn()
        cur = conn.execute(
            "INSERT INTO spans (workflow_id, seq, what, pid, start) VALUES (?, ?, ?, ?, ?)",
            (wid, seq, what, os.getpid(), time.time()),
        )
        try:
            yield
        finally:
            conn.execute("UPDATE spans SET end = ? WHERE n = ?", (time.time(), cur.lastrowid))

    def verified(self, found: str | None) -> None:
        wid, seq = self._where()
        self.db.conn().execute(
            "INSERT INTO verifies VALUES (?, ?, ?, ?, ?)",
            (wid, seq, os.getpid(), found, time.time()),
        )

    # -- the test's side ------------------------------------------------------------------

    def spans(self) -> list[Span]:
        """Every recorded execution: ``(workflow_id, seq, what, pid, start, end)``."""
        rows = self.db.conn().execute(
            "SELECT workflow_id, seq, what, pid, start, end FROM spans ORDER BY n"
        )
        return [(str(w), int(s), str(x), int(p), float(a), b) for w, s, x, p, a, b in rows]

    def verifies(self) -> list[tuple[str, int, int, str | None]]:
        """``(workflow_id, seq, pid, found)`` of every ``verify`` call."""
        rows = self.db.conn().execute("SELECT workflow_id, seq, pid, found FROM verifies")
        return [(str(w), int(s), int(p), f) for w, s, p, f in rows]


def _nap(pause: float) -> None:
    time.sleep(pause * random.uniform(0.5, 1.5))


def declare(app: stalwart.Stalwart, workdir: Path) -> dict[str, Any]:
    """Declare ``chaos_run`` and its steps on ``app``; returns the workflows by name."""
    downstream = Downstream(workdir / "downstream.db")
    trace = Trace(workdir / "trace.db")

    @app.step(name="hop", retry=RETRY)
    def hop(i: int, v: int, pause: float) -> int:
        with trace.executing("hop"):
            _nap(pause)
        return (v * 31 + i) % 1_000_003

    @app.step(name="deposit", retry=RETRY)
    def deposit(n: int, pause: float) -> str:
        with trace.executing("deposit"):
            deposit_id = downstream.deposit(stalwart.idempotency_key(), stalwart.workflow_id(), n)
            _nap(pause)  # the deposit is made; the journal does not know yet
        return deposit_id

    def find_message(n: int, pause: float) -> str | None:
        with trace.executing("verify"):
            found = downstream.find_message(stalwart.idempotency_key())
            trace.verified(found)
        return found

    @app.step(name="send", irreversible=True, verify=find_message, retry=RETRY)
    def send(n: int, pause: float) -> str:
        with trace.executing("send"):
            _nap(pause / 2)
            message_id = downstream.send(stalwart.idempotency_key(), stalwart.workflow_id())
            _nap(pause)  # the message is out; the journal does not know yet
        return message_id

    @app.workflow(name="chaos_run")
    def chaos_run(n: int, pause: float) -> dict[str, Any]:
        v = n
        deposit_id = message_id = ""
        for i in range(STEPS):
            if i == DEPOSIT_AT:
                deposit_id = deposit(n, pause)
            elif i == SEND_AT:
                message_id = send(n, pause)
            else:
                v = hop(i, v, pause)
        return {"v": v, "deposit": deposit_id, "message": message_id}

    return {"chaos_run": chaos_run}


def chain_value(n: int) -> int:
    """The ``v`` that ``chaos_run(n, ...)`` returns."""
    v = n
    for i in range(STEPS):
        if i not in (DEPOSIT_AT, SEND_AT):
            v = (v * 31 + i) % 1_000_003
    return v


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness dumps a stuck worker
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease-seconds", type=float, default=5.0)
    opts = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(threadName)s %(message)s"
    )
    workdir = Path(opts.workdir)
    with stalwart.Stalwart(opts.url, lease_seconds=opts.lease_seconds) as app:
        declare(app, workdir)
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
