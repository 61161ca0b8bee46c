"""``stalwart migrate`` of a big store, SQLite -> PostgreSQL: entries copied per second against
a bare copy of the same rows measured in the same run (goal: at least 20,000 entries/s).

The store is bench/console_seed.py's (100,000 runs, 1,000,000 journal entries, their payloads,
approvals, queues, workers, breakers, schedules and a shared key), cached under bench/.cache.
Each measurement copies into a fresh PostgreSQL schema (STALWART_TEST_POSTGRES_URL, else a
local server), dropped afterwards:

- baseline: every table's rows read with one ``SELECT`` each from the SQLite file and written
  with ``COPY`` in one transaction, the journal's triggers off: what a hand-written dump and
  load costs, with no paging, no verification and nothing else;
- migrate: ``copy_store``, what ``stalwart migrate`` runs (paged reads, ``COPY`` writes, one
  transaction), then its verification (row counts of every table on both sides, payload
  digests), timed apart.

The figure is journal entries per second of the copy; the ratio is the baseline's time over
the copy's. Exits 1 when the copy misses the goal or does not verify.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import console_seed
from console_seed import Rows, Shape, drop_schema, seed_sqlite

import stalwart
from stalwart import testing
from stalwart._store.portable.access import quoted
from stalwart._store.portable.migrate import copy_store
from stalwart._store.portable.tables import COPIED

GOAL = 20_000.0  # journal entries per second
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def fresh_schema(base: str) -> tuple[str, str]:
    schema = f"bench_migrate_{uuid.uuid4().hex[:10]}"
    return f"{base}{'&' if '?' in base else '?'}schema={schema}", schema


def baseline(path: Path, base: str) -> float:
    """Seconds to read every table whole from SQLite and COPY it into a fresh schema."""
    import psycopg

    url, schema = fresh_schema(base)
    stalwart.Stalwart(url).close()  # the schema, created
    try:
        source = sqlite3.connect(path)
        began = time.perf_counter()
        with psycopg.connect(base, options=f"-c search_path={schema}") as conn:
            conn.execute("ALTER TABLE journal DISABLE TRIGGER USER")
            for entry in COPIED:
                found = source.execute(f"PRAGMA table_info({quoted(entry.name)})").fetchall()
                theirs = {
                    r[0]
                    for r in conn.execute(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s",
                        (schema, entry.name),
                    )
                }
                columns = [r[1] for r in found if r[1] in theirs]
                if not columns:
                    continue
                names = ", ".join(quoted(c) for c in columns)
                rows = source.execute(f"SELECT {names} FROM {quoted(entry.name)}")
                with conn.cursor().copy(f"COPY {quoted(entry.name)} ({names}) FROM STDIN") as cp:
                    for row in rows:
                        cp.write_row(row)
            conn.execute("ALTER TABLE journal ENABLE TRIGGER USER")
            conn.commit()
        return time.perf_counter() - began
    finally:
        drop_schema(base, schema)


def migrate(source_url: str, base: str) -> tuple[float, float, bool, int]:
    """Seconds of the copy and of its verification, whether it verified, rows copied."""
    url, schema = fresh_schema(base)
    try:
        with stalwart.Stalwart(source_url) as source, stalwart.Stalwart(url) as target:
            began = time.perf_counter()
            report = copy_store(testing.store_of(source), testing.store_of(target))
            total = time.perf_counter() - began
            for count in report.counts:
                if not count.same:
                    print(f"  MISMATCH {count.table}: {count.source} != {count.target}")
            return report.seconds, total - report.seconds, report.ok, sum(report.copied.values())
    finally:
        drop_schema(base, schema)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
    )
    parser.add_argument("--runs", type=int, default=Shape.runs)
    parser.add_argument("--entries", type=int, default=Shape.entries)
    parser.add_argument("--reseed", action="store_true", help="seed the cached SQLite file again")
    parser.add_argument("--cache", type=Path, default=console_seed.CACHE, help="where it is cached")
    args = parser.parse_args()
    console_seed.CACHE = args.cache
    # a smaller store keeps the default's ten big runs in proportion
    big = max(1, min(Shape.big_runs, args.runs // 10_000))
    shape = Shape(runs=args.runs, entries=args.entries, big_runs=big)

    def make(codec: Any) -> Rows:
        rows = Rows(shape, codec, time.time())
        rows.seeded = rows.generate()
        return rows

    source_url, seeded = seed_sqlite(shape, make, args.reseed)
    path = Path(source_url[len("sqlite:///") :])
    entries = seeded.entries
    print(f"store: {shape.runs:,} runs, {entries:,} journal entries, {seeded.payloads:,} payloads")
    bare = baseline(path, args.postgres_url)
    copy, verify, ok, rows = migrate(source_url, args.postgres_url)
    rate, bare_rate = entries / copy, entries / bare
    print(f"baseline (one SELECT and COPY per table): {bare:.1f} s, {bare_rate:,.0f} entries/s")
    print(
        f"migrate (copy_store): {copy:.1f} s, {rate:,.0f} entries/s ({rows:,} rows), "
        f"verified in {verify:.1f} s ({entries / (copy + verify):,.0f} entries/s with it)"
    )
    print(f"ratio: migrate takes {copy / bare:.2f}x the baseline's time")
    met = rate >= GOAL
    print(f"goal >= {GOAL:,.0f} entries/s: {'met' if met else 'MISSED'}; verified: {ok}")
    return 0 if met and ok else 1


if __name__ == "__main__":
    sys.exit(main())
