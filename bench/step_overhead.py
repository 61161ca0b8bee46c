"""Per-step overhead of stalwart on SQLite, against the floor of a plain ``sqlite3`` loop.

One workflow of ``--steps`` no-op steps runs on a fresh SQLite store per run; the time of
``app.run`` (creating the run, every step, finishing the run) is divided by the step count.
The floor is the least a journal can cost: one autocommitted INSERT per step (its own
transaction, as stalwart's hot path is) into a table created by stalwart's own migrations,
so it has the same columns and indexes as ``journal``, with the same journal mode
(WAL) and ``synchronous`` setting as the durability it is compared with. Each figure is the
median of ``--runs`` runs and the ratio is that of the two medians; stalwart and floor runs
alternate so drift hits both alike, and the last column shows the range of the ratios of
each stalwart run to the floor run beside it, a gauge of the noise.

    python bench/step_overhead.py [--steps 1000] [--runs 5] [--dir PATH] [--postgres-url URL]
                                   [--async]

With PostgreSQL reachable (``--postgres-url``, else ``$STALWART_TEST_POSTGRES_URL``, else the
local server), a third row does the same on PostgreSQL: each run in a fresh schema, the floor
a psycopg loop of autocommitted INSERTs (psycopg prepares them after a few) into a journal
table that stalwart's own migrations created.

With ``--async`` the workflow and its step are ``async def``: one run's steps on the app's
event loop, each awaiting its commit.

Last, the latency of a one-step ``app.run`` (create the run holding its lease; then journal the
step's outcome and finish the run, together: two store transactions) on each backend, the
median of ``--latency-runs`` runs, against a floor of three autocommitted one-row INSERTs on
the same database (what the path cost in commits before the step's outcome went with the
run's end), measured in the same sitting; and on SQLite the pages a one-step run adds to the
write-ahead log (what its two commits write).

It is a benchmark, not a test: it exits 0 whether or not the target is met.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import stalwart

TARGET_RATIO = 2.0
TARGET_DURABILITY = "process"
# durability= setting -> the synchronous pragma stalwart's SQLite store uses for it.
SYNCHRONOUS = {"process": "NORMAL", "power": "FULL"}
WORKFLOW_ID = "bench-step-overhead"

# What stalwart journals for a completed no-op step: ``J`` + JSON of the call and the result.
STEP_INPUT = b'J{"args":[],"kwargs":{}}'
STEP_OUTPUT = b"Jnull"
INSERT = (
    "INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, "
    "started_at, finished_at, input, output, error, by) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def journal_schema() -> str:
    """Stalwart's SQLite migrations, in order: the ``journal`` table as stalwart creates it."""
    folder = resources.files("stalwart._store").joinpath("sql", "sqlite", "migrations")
    names = sorted(e.name for e in folder.iterdir() if re.fullmatch(r"\d{4}_\w+\.sql", e.name))
    if not names:
        raise RuntimeError("found no SQLite migrations in the installed stalwart package")
    return "\n".join(folder.joinpath(name).read_text("utf-8") for name in names)


def time_stalwart(
    url: str, steps: int, durability: str = "process", is_async: bool = False
) -> float:
    """Seconds ``app.run`` takes for one workflow of ``steps`` no-op steps on ``url``
    (``async def`` ones with ``is_async``)."""
    app = stalwart.Stalwart(url, durability=durability)
    try:
        many = declare_async(app) if is_async else declare_sync(app)
        start = time.perf_counter()
        result = app.run(many, steps, workflow_id=WORKFLOW_ID)
        elapsed = time.perf_counter() - start
    finally:
        app.close()
    if result != steps:
        raise RuntimeError(f"the benchmark workflow returned {result!r}, not {steps}")
    return elapsed


def declare_sync(app: stalwart.Stalwart) -> Any:
    """The bench's workflow: ``n`` no-op steps."""

    @app.step
    def noop() -> None:
        return None

    @app.workflow
    def many(n: int) -> int:
        for _ in range(n):
            noop()
        return n

    return many


def declare_async(app: stalwart.Stalwart) -> Any:
    """The bench's workflow, ``async def``: ``n`` no-op steps, awaited one after another."""

    @app.step
    async def noop() -> None:
        return None

    @app.workflow
    async def many(n: int) -> int:
        for _ in range(n):
            await noop()
        return n

    return many


def time_floor(folder: str, steps: int, durability: str, schema: str) -> float:
    """Seconds a plain sqlite3 loop takes for ``steps`` one-row, one-commit inserts."""
    conn = sqlite3.connect(f"{folder}/floor.db", isolation_level=None)  # autocommit
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RuntimeError(f"SQLite refused WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[durability]}")
        conn.executescript(schema)
        execute = conn.execute
        clock = time.time
        start = time.perf_counter()
        for i in range(steps):
            now = clock()
            execute(
                INSERT,
                (
                    WORKFLOW_ID,
                    i + 1,
                    str(i),
                    "step",
                    "noop",
                    "completed",
                    1,
                    now,
                    now,
                    STEP_INPUT,
                    STEP_OUTPUT,
                    None,
                    None,
                ),
            )
        elapsed = time.perf_counter() - start
        (count,) = conn.execute("SELECT count(*) FROM journal").fetchone()
    finally:
        conn.close()
    if count != steps:
        raise RuntimeError(f"the floor loop stored {count} rows, not {steps}")
    return elapsed


PG_INSERT = INSERT.replace("?", "%s")


def pg_schema_url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def time_floor_pg(base: str, schema: str, steps: int) -> float:
    """``steps`` autocommitted one-row INSERTs with psycopg into stalwart's journal table."""
    import psycopg

    stalwart.Stalwart(pg_schema_url(base, schema)).close()  # create the tables
    with psycopg.connect(base, autocommit=True, options=f"-c search_path={schema}") as conn:
        clock = time.time
        start = time.perf_counter()
        for i in range(steps):
            now = clock()
            row = (WORKFLOW_ID, i + 1, str(i), "step", "noop", "completed", 1, now, now)
            conn.execute(PG_INSERT, (*row, STEP_INPUT, STEP_OUTPUT, None, None))
        elapsed = time.perf_counter() - start
        stored = conn.execute("SELECT count(*) FROM journal").fetchone()
    if stored is None or stored[0] != steps:
        raise RuntimeError(f"the floor loop stored {stored}, not {steps} rows")
    return elapsed


def in_fresh_schema(base: str, measure: Callable[[str], float]) -> float:
    """Run ``measure`` with a new schema name, then drop the schema."""
    import uuid

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        return measure(schema)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def postgres_reachable(base: str) -> str | None:
    """``None`` when ``base`` answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(base, connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"


def in_fresh_dir(parent: str | None, measure: Callable[[str], float]) -> float:
    """Run ``measure`` in a new temporary folder (a fresh database file), then remove it."""
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-", dir=parent) as folder:
        return measure(folder)


@dataclass(frozen=True)
class Row:
    """Median microseconds per step of both sides at one durability, and the runs' spread."""

    durability: str
    stalwart_us: float
    floor_us: float
    # The lowest and highest ratio of one run's stalwart time to the floor run beside it.
    ratio_low: float
    ratio_high: float

    @property
    def ratio(self) -> float:
        return self.stalwart_us / self.floor_us


def compare(
    label: str,
    ours: Callable[[str, int], float],
    floor: Callable[[str, int], float],
    fresh: Callable[[Callable[[str], float]], float],
    *,
    steps: int,
    runs: int,
) -> Row:
    """Median per-step times of stalwart (``ours``) and of the floor, each run on a fresh
    store from ``fresh``, runs alternating between the two so drift hits both alike."""
    # Warm up both sides (imports, page cache, first-use costs) outside the measurement.
    warm = max(1, min(steps, 100))
    fresh(lambda place: ours(place, warm))
    fresh(lambda place: floor(place, warm))
    ours_s: list[float] = []
    floor_s: list[float] = []
    for run in range(runs):
        if run % 2 == 0:
            ours_s.append(fresh(lambda place: ours(place, steps)))
            floor_s.append(fresh(lambda place: floor(place, steps)))
        else:
            floor_s.append(fresh(lambda place: floor(place, steps)))
            ours_s.append(fresh(lambda place: ours(place, steps)))
    per_step = 1e6 / steps
    paired = [a / b for a, b in zip(ours_s, floor_s, strict=True)]
    return Row(
        label,
        statistics.median(ours_s) * per_step,
        statistics.median(floor_s) * per_step,
        min(paired),
        max(paired),
    )


def declare_one_step(app: stalwart.Stalwart) -> Any:
    """A workflow of one no-op step, declared on ``app``."""

    @app.step
    def noop() -> None:
        return None

    @app.workflow
    def one_step() -> None:
        noop()

    return one_step


def one_step_latency(url: str, runs: int) -> float:
    """Median seconds of a one-step ``app.run`` on a fresh run each time."""
    with stalwart.Stalwart(url) as app:
        one_step = declare_one_step(app)
        app.run(one_step, workflow_id="latency-warm-up")
        times = []
        for i in range(runs):
            start = time.perf_counter()
            app.run(one_step, workflow_id=f"latency-{i}")
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def wal_pages_per_run(folder: str, runs: int = 100, warm: int = 200) -> float:
    """Pages a one-step ``app.run`` adds to SQLite's write-ahead log: the log's growth over
    ``runs`` runs, ten at a time after a ``TRUNCATE`` checkpoint (far below the 1,000 pages
    after which a commit checkpoints by itself and the log starts over), on a store already
    holding ``warm`` runs, so that its indexes have more than one leaf. A page is written
    once per transaction that changes it: this counts the pages a run's two commits write."""
    path = os.path.join(folder, "wal.db")
    grown = 0
    with stalwart.Stalwart(f"sqlite:///{path}") as app:
        one_step = declare_one_step(app)
        for _ in range(warm):
            app.run(one_step)
        db = sqlite3.connect(path)
        try:
            page = int(db.execute("PRAGMA page_size").fetchone()[0])
            for _ in range(runs // 10):
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                before = os.path.getsize(path + "-wal")
                for _ in range(10):
                    app.run(one_step)
                grown += os.path.getsize(path + "-wal") - before
        finally:
            db.close()
    return grown / (page + 24) / (runs // 10 * 10)  # a frame: a 24-byte header and the page


def three_inserts_sqlite(folder: str, runs: int, schema: str) -> float:
    """Median seconds of three autocommitted INSERTs into a journal table (WAL, NORMAL)."""
    conn = sqlite3.connect(f"{folder}/floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(schema)
    return _three_inserts(conn.execute, INSERT, runs)


def three_inserts_pg(base: str, schema: str, runs: int) -> float:
    """Median seconds of three autocommitted INSERTs with psycopg into stalwart's journal."""
    import psycopg

    stalwart.Stalwart(pg_schema_url(base, schema)).close()  # create the tables
    with psycopg.connect(base, autocommit=True, options=f"-c search_path={schema}") as conn:
        return _three_inserts(conn.execute, PG_INSERT, runs)


def _three_inserts(execute: Callable[[str, Any], object], sql: str, runs: int) -> float:
    times = []
    for i in range(runs + 1):  # the first is a warm-up
        start = time.perf_counter()
        for seq in range(3):
            now = time.time()
            row = (f"floor-{i}", seq + 1, str(seq), "step", "noop", "completed", 1, now, now)
            execute(sql, (*row, STEP_INPUT, STEP_OUTPUT, None, None))
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def print_latency(label: str, ours: float, floor: float) -> None:
    print(f"{label:<18}{ours * 1e3:>18.2f}{floor * 1e3:>15.2f}{ours / floor:>7.2f}x", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=1000, help="steps per workflow (1000)")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure; median (5)")
    parser.add_argument(
        "--dir",
        default=None,
        help="where the temporary databases go (default: the system temp folder); "
        "it should be a real disk, not tmpfs, for the durability figures to mean anything",
    )
    parser.add_argument(
        "--latency-runs",
        type=int,
        default=200,
        help="one-step runs per latency figure (200; 0 leaves the latency figures out)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL")
        or "postgresql://postgres@127.0.0.1:5432/test",
        help="a database where the bench may create and drop schemas",
    )
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="the workflow and its step are async def (the run's steps on the app's loop)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.runs < 1:
        parser.error("--steps and --runs must be >= 1")
    if args.latency_runs < 0:
        parser.error("--latency-runs must be >= 0 (0 leaves the latency figures out)")

    schema = journal_schema()
    where = os.path.abspath(args.dir or tempfile.gettempdir())
    print(
        f"stalwart {stalwart.__version__} step overhead: "
        f"{args.steps} no-op {'async def ' if args.use_async else ''}steps per workflow, "
        f"median of {args.runs} runs, "
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, DBs in {where}"
    )
    print()
    header = (
        f"{'durability':<18}{'stalwart us/step':>18}{'floor us/step':>15}{'ratio':>8}"
        f"{'per-run ratios':>18}"
    )
    print(header)
    rows = []
    for durability, synchronous in SYNCHRONOUS.items():
        row = compare(
            durability,
            lambda folder, n, d=durability: time_stalwart(
                f"sqlite:///{folder}/stalwart.db", n, d, args.use_async
            ),
            lambda folder, n, d=durability: time_floor(folder, n, d, schema),
            lambda measure: in_fresh_dir(args.dir, measure),
            steps=args.steps,
            runs=args.runs,
        )
        rows.append(row)
        label = f"{durability} ({synchronous})"
        spread = f"{row.ratio_low:.2f}-{row.ratio_high:.2f}x"
        print(
            f"{label:<18}{row.stalwart_us:>18.1f}{row.floor_us:>15.1f}{row.ratio:>7.2f}x"
            f"{spread:>18}",
            flush=True,
        )
    unreachable = postgres_reachable(args.postgres_url)
    if unreachable is None:
        base = args.postgres_url
        row = compare(
            "postgres",
            lambda schema, n: time_stalwart(
                pg_schema_url(base, schema), n, is_async=args.use_async
            ),
            lambda schema, n: time_floor_pg(base, schema, n),
            lambda measure: in_fresh_schema(base, measure),
            steps=args.steps,
            runs=args.runs,
        )
        spread = f"{row.ratio_low:.2f}-{row.ratio_high:.2f}x"
        print(
            f"{'postgres (server)':<18}{row.stalwart_us:>18.1f}{row.floor_us:>15.1f}"
            f"{row.ratio:>7.2f}x{spread:>18}",
            flush=True,
        )
    else:
        print(f"postgres: skipped, the server did not answer ({unreachable})")
    print()
    runs = args.latency_runs
    if runs > 0:
        one_step_figures(args, schema, unreachable)
    target = next(r for r in rows if r.durability == TARGET_DURABILITY)
    verdict = "MET" if target.ratio <= TARGET_RATIO else "NOT MET"
    print(
        f"target: at most {TARGET_RATIO:.1f}x the floor at durability={TARGET_DURABILITY!r}: "
        f"{verdict} ({target.ratio:.2f}x)"
    )
    return 0


def one_step_figures(args: argparse.Namespace, schema: str, unreachable: str | None) -> None:
    """The one-step ``app.run`` latencies against three INSERTs, and SQLite's WAL pages a run."""
    runs = args.latency_runs
    print(f"{'one-step app.run':<18}{'stalwart ms':>18}{'3 INSERTs ms':>15}{'ratio':>8}")
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-", dir=args.dir) as folder:
        ours = one_step_latency(f"sqlite:///{folder}/stalwart.db", runs)
        floor = three_inserts_sqlite(folder, runs, schema)
    print_latency("sqlite (process)", ours, floor)
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-", dir=args.dir) as folder:
        pages = wal_pages_per_run(folder)
    print(f"{'':<18}{pages:>18.1f} WAL pages a run (SQLite)")
    if unreachable is None:
        base = args.postgres_url
        ours = in_fresh_schema(
            base, lambda schema: one_step_latency(pg_schema_url(base, schema), runs)
        )
        floor = in_fresh_schema(base, lambda schema: three_inserts_pg(base, schema, runs))
        print_latency("postgres (server)", ours, floor)
    print()


if __name__ == "__main__":
    sys.exit(main())
