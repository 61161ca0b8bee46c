"""Stores and floors for ``bench/waits.py``: fresh store URLs on SQLite or PostgreSQL, and the
bare commit-to-observe latency of each store's change signal, measured across two processes.

The floor of a wake-up: a writer process commits (SQLite: one autocommitted INSERT into a
scratch WAL file with ``synchronous=NORMAL``, as the store has it; PostgreSQL: a bare
``NOTIFY``) and prints ``time.time()`` once the commit returned; this process watches (SQLite:
``PRAGMA data_version`` read in a tight loop; PostgreSQL: a LISTENing connection's
``notifies()``) and notes ``time.time()`` when it sees the change. Nothing stalwart does is in it.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CHANNEL = "stalwart_bench_floor"


@dataclass
class Stores:
    """Fresh stores of one kind: ``sqlite`` (files under ``folder``) or ``postgres``."""

    kind: str
    postgres_url: str
    schemas: list[str] = field(default_factory=list)

    def fresh(self, folder: str, tag: str) -> str:
        """The URL of a new, empty store."""
        if self.kind == "sqlite":
            return f"sqlite:///{folder}/{tag}.db"
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        self.schemas.append(schema)
        separator = "&" if "?" in self.postgres_url else "?"
        return f"{self.postgres_url}{separator}schema={schema}"

    def drop(self) -> None:
        """Drop every schema handed out (SQLite's files go with their folder)."""
        if not self.schemas:
            return
        import psycopg

        with psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=5) as conn:
            while self.schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {self.schemas.pop()} CASCADE")


def _writer(target: str) -> int:
    """The writer process: one commit per line read from stdin, then the time it returned."""
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            for _ in sys.stdin:
                conn.execute(f"NOTIFY {CHANNEL}")
                print(time.time(), flush=True)
        return 0
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    for _ in sys.stdin:
        conn.execute("INSERT INTO t (at) VALUES (?)", (time.time(),))
        print(time.time(), flush=True)
    return 0


def commit_to_observe(kind: str, folder: str, postgres_url: str, n: int = 100) -> float:
    """The p50, in seconds, of a bare commit in another process to this process seeing it."""
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
