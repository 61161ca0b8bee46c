"""Group commit: B = 200 runs of 10 no-op steps on one worker process with concurrency 200.

For each setting (SQLite with ``durability="process"``, SQLite with ``durability="power"``,
PostgreSQL) a fresh store gets one worker process (this file in worker mode, ``--worker``),
started and ready before the clock starts (interpreter start-up is not measured); then the
bench enqueues the runs with ``app.start``. Seconds = from just before the first
``app.start`` to the ``updated_at`` of the last run to complete (the enqueueing is part of
it); steps/s = runs x steps / seconds. Each figure is the median of ``--repeat`` samples.
With ``--enqueue-first`` the runs are started before the worker and the clock starts as it
begins serving: the worker alone.

The runs are started by one thread of the bench's process, one ``app.start`` after another (B as
issue 22 defines it), and again by ``--starters`` threads at once (8 by default), the runs split
among them, as an application's concurrent request handlers would: their ``app.start`` calls
share commits through the store's write pipeline. Both are printed, each with its floor and
ratio; ``--starters 1`` leaves the concurrent figure out. With ``--async`` the workflow and its
step are ``async def``: the runs are tasks on the app's event loop.

The floor is the same number of steps (runs x steps) of bare autocommitted INSERTs of one
journal row each, one after the other on one connection, into a journal table stalwart's own
migrations created, with the same durability settings (SQLite: WAL and ``synchronous``
NORMAL or FULL; PostgreSQL: ``synchronous_commit=on``), measured in the same sitting just
before. The ratio is B's steps/s over the floor's INSERTs/s: above 1, concurrent runs share
commits.

Beside each figure, the worker process's CPU time per step (user + system, read from
``/proc`` from just before the first ``app.start`` to the poll that saw the last run complete;
Linux only, else left out): 20,000 steps/s on the one core the GIL gives is 50 us a step all
told, and on a machine shared with other work the CPU a step costs moves less than its rate.
With ``--threads``, each of the worker's threads' share of it too, busiest first (the app's
event loop, the claim loop, the commit threads: which is which shows in their sizes).

    python bench/group_commit.py [--runs 200] [--steps 10] [--concurrency 200] [--repeat 3]
                                 [--settings sqlite,power,postgres] [--postgres-url URL]
                                 [--enqueue-first] [--starters 8] [--async] [--threads]

It is a benchmark, not a test: it exits 0 whatever the figures (it fails only if a worker
dies or runs never finish).
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
from pathlib import Path
from typing import Any

import stalwart

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet import (  # noqa: E402  (a sibling script, importable once its folder is on the path)
    DEFAULT_POSTGRES_URL,
    INSERT_POSTGRES,
    INSERT_SQLITE,
    journal_row,
    postgres_version,
    schema_of,
)

TARGETS = {"sqlite": 20_000.0, "power": 8_000.0, "postgres": 5_000.0}
DURABILITY = {"sqlite": "process", "power": "power", "postgres": "process"}
SYNCHRONOUS = {"process": "NORMAL", "power": "FULL"}
READY_TIMEOUT_S = 60.0
SETTLE_SECONDS = 0.5
POLL_SECONDS = 0.05


def build(url: str, durability: str, is_async: bool = False) -> tuple[stalwart.Stalwart, Any]:
    """The app on ``url`` and its one workflow, named so the bench and the worker agree
    (``async def`` with ``is_async``)."""
    app = stalwart.Stalwart(url, durability=durability)
    if is_async:

        @app.step(name="gc_noop")
        async def noop_async() -> None:
            return None

        @app.workflow(name="gc_steps")
        async def steps_async(n: int) -> int:
            for _ in range(n):
                await noop_async()
            return n

        return app, steps_async

    @app.step(name="gc_noop")
    def noop() -> None:
        return None

    @app.workflow(name="gc_steps")
    def steps(n: int) -> int:
        for _ in range(n):
            noop()
        return n

    return app, steps


def serve(url: str, durability: str, concurrency: int, ready: str, is_async: bool) -> int:
    """The worker process: serve the workflow until SIGTERM."""
    app, _ = build(url, durability, is_async)
    try:
        partial = Path(f"{ready}.partial")
        partial.write_text(str(os.getpid()), "ascii")
        partial.replace(ready)
        app.serve(concurrency=concurrency)
    finally:
        app.close()
    return 0


def fresh_url(setting: str, folder: str, postgres_url: str) -> str:
    """A new, empty store for ``setting``."""
    if setting != "postgres":
        path = Path(folder) / f"store-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        return f"sqlite:///{path}/stalwart.db"
    separator = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{separator}schema=bench_{uuid.uuid4().hex[:12]}"


def drop(url: str, postgres_url: str) -> None:
    """Drop a PostgreSQL store's schema (a SQLite store goes with the temporary folder)."""
    if "schema=" not in url:
        return
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema_of(url)} CASCADE")


def floor_rate(setting: str, url: str, postgres_url: str, count: int) -> float:
    """INSERTs/s of ``count`` bare autocommitted journal INSERTs, serially, on one connection
    (into a store ``url`` that stalwart's migrations created)."""
    workflow_id = f"floor-{uuid.uuid4().hex[:8]}"
    if setting != "postgres":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[DURABILITY[setting]]}")
            start = time.perf_counter()
            for n in range(1, count + 1):
                conn.execute(INSERT_SQLITE, journal_row(workflow_id, n))
            return count / (time.perf_counter() - start)
        finally:
            conn.close()
    import psycopg

    options = f"-c search_path={schema_of(url)} -c synchronous_commit=on"
    with psycopg.connect(postgres_url, autocommit=True, options=options) as pg:
        start = time.perf_counter()
        for n in range(1, count + 1):
            pg.execute(INSERT_POSTGRES, journal_row(workflow_id, n))
        return count / (time.perf_counter() - start)


def start_runs(app: stalwart.Stalwart, steps: Any, runs: int, s: int, starters: int) -> None:
    """``app.start`` ``runs`` runs of ``s`` steps: serially with one starter, else from
    ``starters`` threads at once, run ``i`` started by thread ``i % starters``."""
    if starters <= 1:
        for i in range(runs):
            app.start(steps, s, workflow_id=f"gc-{i:05d}")
        return
    failures: list[BaseException] = []

    def starter(first: int) -> None:
        try:
            for i in range(first, runs, starters):
                app.start(steps, s, workflow_id=f"gc-{i:05d}")
        except BaseException as exc:  # reported by the bench's thread
            failures.append(exc)

    threads = [threading.Thread(target=starter, args=(k,)) for k in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, where ``/proc`` tells it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text("ascii").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_seconds(pid: int) -> dict[str, float]:
    """The CPU time (user + system) each thread of process ``pid`` has used, by thread id
    (empty where ``/proc`` does not tell it)."""
    used: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text("ascii").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        used[task.name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return used


def one_sample(
    setting: str, args: argparse.Namespace, folder: str, starters: int
) -> tuple[float, float, float | None]:
    """B's steps/s with ``starters`` threads starting the runs, the floor's INSERTs/s, each
    on a fresh store, and the worker's CPU seconds per step (``None`` where it cannot be
    read)."""
    durability = DURABILITY[setting]
    n, s = args.runs, args.steps
    floor_url = fresh_url(setting, folder, args.postgres_url)
    # migrates: the floor writes stalwart's table
    floor_app, _ = build(floor_url, durability, args.use_async)
    floor_app.close()
    try:
        floor = floor_rate(setting, floor_url, args.postgres_url, n * s)
    finally:
        drop(floor_url, args.postgres_url)

    url = fresh_url(setting, folder, args.postgres_url)
    app, steps = build(url, durability, args.use_async)
    enqueued = 0.0
    if args.enqueue_first:  # the worker alone is timed: the runs wait for it
        began = time.time()
        start_runs(app, steps, n, s, starters)
        enqueued = time.time() - began
    ready = Path(folder) / f"ready-{uuid.uuid4().hex[:8]}"
    log = Path(folder) / f"{ready.name}.log"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            [
                *(sys.executable, __file__, "--worker", url, "--durability", durability),
                *("--concurrency", str(args.concurrency), "--ready", str(ready)),
                *(["--async"] if args.use_async else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.02)
        if args.enqueue_first:
            cpu_before = cpu_seconds(worker.pid)  # its start-up is in it: a bound, not a figure
            first = ready.stat().st_mtime  # written just before the worker starts serving
            threads_before = thread_seconds(worker.pid)
        else:
            time.sleep(SETTLE_SECONDS)
            cpu_before = cpu_seconds(worker.pid)
            threads_before = thread_seconds(worker.pid)
            first = time.time()
            start_runs(app, steps, n, s, starters)
            enqueued = time.time() - first
        deadline = time.monotonic() + 120 + n * s / 50
        while True:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker died:\n{log.read_text()[-2000:]}")
            done = app.list_workflows(status="completed", limit=n)
            if len(done) >= n:
                cpu_after = cpu_seconds(worker.pid)
                threads_after = thread_seconds(worker.pid)
                break
            if app.list_workflows(status="failed", limit=1):
                raise RuntimeError(f"a run failed:\n{log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(done)} of {n} runs completed in time")
            time.sleep(POLL_SECONDS)
        last = max(info.updated_at.timestamp() for info in done)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        app.close()
        drop(url, args.postgres_url)
    rate = n * s / (last - first)
    cpu = None
    if cpu_before is not None and cpu_after is not None:
        cpu = (cpu_after - cpu_before) / (n * s)
    took = "before the clock started" if args.enqueue_first else f"of {last - first:.2f} s"
    print(
        f"  {setting}, {starters} starter{'s' if starters > 1 else ''}: {rate:,.0f} steps/s "
        f"(the {n} app.start calls took {enqueued:.2f} s "
        f"{took}), floor {floor:,.0f} INSERTs/s, worker CPU "
        f"{'?' if cpu is None else f'{cpu * 1e6:.0f}'} us/step",
        flush=True,
    )
    if args.threads:
        spent = sorted(
            (used - threads_before.get(tid, 0.0) for tid, used in threads_after.items()),
            reverse=True,
        )
        busy = [f"{seconds * 1e6 / (n * s):.1f}" for seconds in spent if seconds > 0]
        print(f"    the worker's threads, CPU a step (us), busiest first: {', '.join(busy)}")
    return rate, floor, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per sample (200)")
    parser.add_argument("--steps", type=int, default=10, help="no-op steps per run (10)")
    parser.add_argument(
        "--concurrency", type=int, default=200, help="the worker's concurrency (200)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="samples per setting; the median is shown (3)"
    )
    parser.add_argument(
        "--settings",
        default="sqlite,power,postgres",
        help='comma-separated, any of: sqlite (durability="process"), power (SQLite with '
        'durability="power"), postgres (left out when the server is unreachable); '
        "default: all three",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="a libpq URL of a database where the bench may create and drop schemas "
        f"(default: $STALWART_TEST_POSTGRES_URL, else {DEFAULT_POSTGRES_URL})",
    )
    parser.add_argument(
        "--enqueue-first",
        action="store_true",
        help="start the runs before the worker and time the worker alone, from the moment it "
        "is ready (B proper times the enqueueing too)",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="also print each of the worker's threads' CPU a step, busiest first (Linux)",
    )
    parser.add_argument(
        "--starters",
        type=int,
        default=8,
        help="threads of the bench's process starting the runs at once, for the second "
        "figure beside the serial one (8; 1: the serial figure alone)",
    )
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="the workflow and its step are async def (B's runs as tasks on the app's loop)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--durability", default="process", help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.worker, args.durability, args.concurrency, args.ready, args.use_async)

    settings = [name.strip() for name in args.settings.split(",") if name.strip()]
    if "postgres" in settings and postgres_version(args.postgres_url) is None:
        settings.remove("postgres")
    rows = []
    starters = sorted({1, max(1, args.starters)})
    with tempfile.TemporaryDirectory(prefix="stalwart-gc-") as folder:
        for setting in settings:
            for count in starters:
                samples = [one_sample(setting, args, folder, count) for _ in range(args.repeat)]
                rate = statistics.median(r for r, _, _ in samples)
                floor = statistics.median(f for _, f, _ in samples)
                cpus = [c for _, _, c in samples if c is not None]
                median_cpu = statistics.median(cpus) if cpus else None
                rows.append((setting, count, rate, floor, median_cpu))
    print(
        f"\nB = {args.runs} runs x {args.steps} no-op steps"
        f"{' (async def)' if args.use_async else ''}, one worker, concurrency "
        f"{args.concurrency}; medians of {args.repeat}"
    )
    print(
        f"{'setting':<10} {'starters':>8} {'steps/s':>10} {'floor/s':>10} {'ratio':>7} "
        f"{'target':>8} {'CPU us/step':>12}"
    )
    for setting, count, rate, floor, cpu in rows:
        print(
            f"{setting:<10} {count:>8} {rate:>10,.0f} {floor:>10,.0f} {rate / floor:>6.2f}x "
            f"{TARGETS[setting]:>8,.0f} {'?' if cpu is None else f'{cpu * 1e6:.0f}':>12}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
