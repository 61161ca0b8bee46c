"""Floors for ``bench/waits.py`` (its fresh stores are ``bench/fleet.py``'s ``Stores``): the
bare commit-to-observe latency of each store's change signal, measured across two processes.

The floor of a wake-up: a writer process commits (SQLite: one autocommitted INSERT into a
scratch WAL file with ``synchronous=NORMAL``, as the store has it; PostgreSQL: a bare
``NOTIFY``), printing ``time.time()`` taken just before it sends the commit; this process
watches (SQLite: ``PRAGMA data_version`` read in a tight loop; PostgreSQL: a LISTENing
connection's ``notifies()``) and notes ``time.time()`` when it sees the change. Nothing
stalwart does is in it.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

CHANNEL = "stalwart_bench_floor"


class CommitClock:
    """When PostgreSQL delivered each of a store's notifications (its ``runs`` trigger fires
    one per transaction that changes a run's status, wake time or lease), to a connection of
    its own in a thread of this process: commit times, read to a tenth of a millisecond."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.times: list[float] = []
        self._schema = url.rsplit("schema=", 1)[1]
        self._conn = psycopg.connect(url.split("?", 1)[0], autocommit=True)
        self._conn.execute("LISTEN stalwart")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            for note in self._conn.notifies(timeout=0.1):
                if note.payload == self._schema:
                    self.times.append(time.time())

    def first_after(self, moment: float, limit: float) -> float | None:
        """The first commit seen after ``moment``, waiting up to ``limit`` seconds for it."""
        deadline = time.monotonic() + limit
        while True:
            found = [t for t in self.times if t > moment]
            if found or time.monotonic() > deadline:
                return min(found, default=None)
            time.sleep(0.001)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._conn.close()


def round_trip(postgres_url: str, n: int = 100) -> float:
    """The p50, in seconds, of one ``SELECT 1`` on PostgreSQL: what each statement of a
    transaction costs at least."""
    import psycopg

    times = []
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        for _ in range(n):
            t = time.perf_counter()
            pg.execute("SELECT 1")
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def bare_insert(kind: str, folder: str, postgres_url: str, n: int = 100) -> float:
    """The p50, in seconds, of one bare autocommitted INSERT with the store's durability
    (SQLite: WAL, ``synchronous=NORMAL``; PostgreSQL: ``synchronous_commit=on``)."""
    table = f"bench_floor_{uuid.uuid4().hex[:12]}"
    times = []
    if kind == "sqlite":
        conn = sqlite3.connect(str(Path(folder) / "insert.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"CREATE TABLE {table} (at REAL)")
        for _ in range(n):
            t = time.perf_counter()
            conn.execute(f"INSERT INTO {table} (at) VALUES (?)", (t,))
            times.append(time.perf_counter() - t)
        conn.close()
        return statistics.median(times)
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as pg:
        pg.execute("SET synchronous_commit = on")
        pg.execute(f"CREATE TABLE {table} (at DOUBLE PRECISION)")
        try:
            for _ in range(n):
                t = time.perf_counter()
                pg.execute(f"INSERT INTO {table} (at) VALUES (%s)", (t,))
                times.append(time.perf_counter() - t)
        finally:
            pg.execute(f"DROP TABLE {table}")
    return statistics.median(times)


def _writer(target: str) -> int:
    """The writer process: one commit per line read from stdin, then the time it returned."""
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            for _ in sys.stdin:
                before = time.time()
                conn.execute(f"NOTIFY {CHANNEL}")
                print(before, flush=True)
        return 0
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    for _ in sys.stdin:
        before = time.time()
        conn.execute("INSERT INTO t (at) VALUES (?)", (before,))
        print(before, flush=True)
    return 0


def commit_to_observe(kind: str, folder: str, postgres_url: str, n: int = 100) -> float:
    """The p50, in seconds, from a bare commit sent in another process to this process seeing
    it: the commit itself and its delivery."""
    if kind == "sqlite":
        target = str(Path(folder) / "floor.db")
        conn = sqlite3.connect(target, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (at REAL)")
    else:
        import psycopg

        target = postgres_url
        pg = psycopg.connect(postgres_url, autocommit=True)
        pg.execute(f"LISTEN {CHANNEL}")
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--writer", target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    latencies = []
    try:
        for _ in range(n):
            time.sleep(0.005)
            if kind == "sqlite":
                before = conn.execute("PRAGMA data_version").fetchone()[0]
                proc.stdin.write("go\n")
                proc.stdin.flush()
                while conn.execute("PRAGMA data_version").fetchone()[0] == before:
                    pass
                seen = time.time()
            else:
                proc.stdin.write("go\n")
                proc.stdin.flush()
                for _note in pg.notifies(timeout=5, stop_after=1):
                    pass
                seen = time.time()
            latencies.append(seen - float(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        if kind == "sqlite":
            conn.close()
        else:
            pg.close()
    return statistics.median(latencies)


if __name__ == "__main__" and sys.argv[1:2] == ["--writer"]:
    sys.exit(_writer(sys.argv[2]))
