"""Durable streams on SQLite and PostgreSQL: how fast runs can emit, how many stream-only
transactions a worker spends on it, and how soon a reader in another process sees a chunk.

1. Throughput, one run: a step emits ``--chunks`` small ``str`` chunks (a text delta each)
   back to back;
   chunks/s = chunks / (first emit -> the run's end, when every chunk is durable). Floor: the
   same number of rows written to a scratch table of the same store in plain transactions of
   1,000 rows (``executemany``), nothing of stalwart in it.
2. Throughput, ``--runs`` runs at once: a worker in this process with that many threads; each
   run's step emits ``--chunks // --runs`` chunks, in bursts of 100 with a 2 ms pause after
   each (as a model streams); chunks/s over all runs, first start -> last
   end. The stream-only transactions (the background flusher's) are counted and divided by the
   duration: at most 40 a second per worker is the claim (one flush every 25 ms at most,
   whatever the number of runs). Floor: as in part 1.
3. Emit to reader, across processes: a worker subprocess runs a workflow whose step emits a
   chunk holding ``time.time()`` every ``--every`` seconds; this process follows
   ``app.stream`` and notes ``time.time()`` as each chunk arrives. Latency p50 and p95 against
   the goal of 50 ms. Floor: the bare commit-to-observe latency of the store's change signal
   across two processes (``wake_floors.py``).

    python bench/streams.py [--chunks 200000] [--runs 100] [--latency 200] [--every 0.01]
        [--store sqlite] [--store postgres] [--postgres-url URL]

A benchmark, not a test: it exits 0 whether or not the goals are met (1 only if a run fails).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from fleet import Stores, postgres_version
from wake_floors import commit_to_observe

import stalwart
from stalwart import testing

GOAL_CHUNKS_PER_S = 50_000  # on SQLite, 100 runs at once
GOAL_FLUSHES_PER_S = 40.0  # stream-only transactions a second, per worker
GOAL_LATENCY_P95_S = 0.050
FLOOR_BATCH = 1_000
DELTA = "token "  # what a model's text delta looks like
BURST, PAUSE = 100, 0.002  # part 2: deltas emitted back to back, then a pause (seconds)


def declare(app: stalwart.Stalwart) -> tuple[Any, Any]:
    """The bench's workflows: ``talk(n, pause)`` emits ``n`` deltas (``pause`` seconds after
    each ``BURST``); ``ticker(n, every)`` emits ``n``
    chunks holding their emit time, ``every`` seconds apart."""

    @app.step(name="say")
    def say(n: int, pause: float) -> int:
        for i in range(n):
            stalwart.emit(DELTA)
            if pause and i % BURST == BURST - 1:
                time.sleep(pause)  # a model streams in bursts: the flusher writes meanwhile
        return n

    @app.workflow(name="talk")
    def talk(n: int, pause: float = 0.0) -> int:
        return say(n, pause)

    @app.step(name="tick")
    def tick(n: int, every: float) -> None:
        for i in range(n):
            stalwart.emit({"i": i, "t": time.time()})
            time.sleep(every)

    @app.workflow(name="ticker")
    def ticker(n: int, every: float) -> None:
        tick(n, every)

    return talk, ticker


def floor_rows_per_s(url: str, rows: int) -> float:
    """Rows a second into a scratch table of the store, ``FLOOR_BATCH`` per transaction."""
    table = f"bench_stream_floor_{uuid.uuid4().hex[:8]}"
    data = [("run", "default", i, 1, 1, f"o{i}", b'J"token "', time.time()) for i in range(rows)]
    columns = "(workflow_id TEXT, stream TEXT, n INTEGER, seq INTEGER, attempt INTEGER, "
    columns += "origin TEXT, data BLOB, at REAL, PRIMARY KEY (workflow_id, stream, n))"
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"CREATE TABLE {table} {columns}")
        insert = f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        started = time.perf_counter()
        for start in range(0, rows, FLOOR_BATCH):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert, data[start : start + FLOOR_BATCH])
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        conn.execute(f"DROP TABLE {table}")
        conn.close()
        return rows / elapsed
    import psycopg

    with psycopg.connect(url.split("?", 1)[0]) as pg:
        pg.execute(f"CREATE TABLE {table} {columns.replace('BLOB', 'BYTEA')}")
        pg.commit()
        insert = f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        started = time.perf_counter()
        for start in range(0, rows, FLOOR_BATCH):
            with pg.cursor() as cur:
                cur.executemany(insert, data[start : start + FLOOR_BATCH])
            pg.commit()
        elapsed = time.perf_counter() - started
        pg.execute(f"DROP TABLE {table}")
        pg.commit()
    return rows / elapsed


class FlushCounter:
    """Counts the store's stream-only transactions (``append_chunks``) while installed."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.count = 0
        self.real = store.append_chunks
        lock = threading.Lock()

        def counted(batch: Any) -> Any:
            with lock:
                self.count += 1
            return self.real(batch)

        store.append_chunks = counted


def part_one_run(stores: Stores, chunks: int) -> None:
    url = stores.fresh()
    with stalwart.Stalwart(url) as app:
        talk, _ticker = declare(app)
        started = time.perf_counter()
        assert app.run(talk, chunks, workflow_id="one") == chunks
        elapsed = time.perf_counter() - started
        written = len(list(app.stream("one", follow=False)))
    assert written == chunks, written
    floor = floor_rows_per_s(stores.fresh(), chunks)
    rate = chunks / elapsed
    print(f"  one run:   {rate:10,.0f} chunks/s   floor {floor:10,.0f} rows/s", end="")
    print(f"   ratio {rate / floor:.2f}")


def part_many_runs(stores: Stores, chunks: int, runs: int) -> None:
    url = stores.fresh()
    each = chunks // runs
    with stalwart.Stalwart(url) as app:
        talk, _ticker = declare(app)
        flushes = FlushCounter(testing.store_of(app))
        worker = testing.worker(app, concurrency=runs)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        started = time.perf_counter()
        handles = [app.start(talk, each, PAUSE, workflow_id=f"run-{i}") for i in range(runs)]
        for handle in handles:
            assert handle.result(timeout=600) == each
        elapsed = time.perf_counter() - started
        worker.stop()
        thread.join(30)
    floor = floor_rows_per_s(stores.fresh(), chunks)
    rate = each * runs / elapsed
    per_s = flushes.count / elapsed
    met = "met" if rate >= GOAL_CHUNKS_PER_S else "missed"
    goal = f"goal {GOAL_CHUNKS_PER_S:,}: {met}" if stores.kind == "sqlite" else "no goal here"
    print(
        f"  {runs} runs:  {rate:10,.0f} chunks/s   floor {floor:10,.0f} rows/s   "
        f"ratio {rate / floor:.2f}   ({goal})"
    )
    verdict = "met" if per_s <= GOAL_FLUSHES_PER_S else "missed"
    print(
        f"  stream-only transactions: {flushes.count} in {elapsed:.2f} s = {per_s:.1f}/s "
        f"(goal at most {GOAL_FLUSHES_PER_S:.0f}/s: {verdict})"
    )


def part_latency(stores: Stores, folder: str, postgres_url: str, n: int, every: float) -> None:
    url = stores.fresh()
    with stalwart.Stalwart(url) as app:
        _talk, ticker = declare(app)
        app.start(ticker, n, every, workflow_id="ticker")
        worker = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", url],
            stdout=subprocess.DEVNULL,
        )
        try:
            latencies = []
            for chunk in app.stream("ticker", timeout=60):
                latencies.append(time.time() - chunk.data["t"])
        finally:
            worker.terminate()
            worker.wait(30)
    assert len(latencies) == n, len(latencies)
    latencies.sort()
    p50 = statistics.median(latencies)
    p95 = latencies[int(len(latencies) * 0.95) - 1]
    floor = commit_to_observe(stores.kind, folder, postgres_url)
    verdict = "met" if p95 <= GOAL_LATENCY_P95_S else "missed"
    print(
        f"  emit -> reader in another process: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms "
        f"(goal p95 <= 50 ms: {verdict})   floor (bare commit -> observe) {floor * 1000:.2f} ms   "
        f"ratio p50/floor {p50 / floor:.0f}"
    )


def serve(url: str) -> int:
    """The worker of part 3, in its own process."""
    with stalwart.Stalwart(url) as app:
        declare(app)
        app.serve(concurrency=4)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--latency", type=int, default=200, help="chunks timed in part 3")
    parser.add_argument("--every", type=float, default=0.01, help="seconds between them")
    parser.add_argument("--store", action="append", choices=["sqlite", "postgres"])
    parser.add_argument("--postgres-url", default=os.environ.get("STALWART_TEST_POSTGRES_URL"))
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve)
    kinds = args.store or (["sqlite", "postgres"] if args.postgres_url else ["sqlite"])
    for kind in kinds:
        if kind == "postgres":
            version = postgres_version(args.postgres_url or "")
            if version is None:
                continue
            print(f"PostgreSQL {version}")
        else:
            print(f"SQLite {sqlite3.sqlite_version} (WAL, synchronous=NORMAL)")
        with tempfile.TemporaryDirectory() as folder:
            stores = Stores(kind, folder, args.postgres_url or "")
            try:
                part_one_run(stores, args.chunks)
                part_many_runs(stores, args.chunks, args.runs)
                part_latency(stores, folder, args.postgres_url or "", args.latency, args.every)
            finally:
                stores.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
