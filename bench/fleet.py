"""A fleet of worker processes on SQLite and on PostgreSQL: steps per second, and wake-up latency.

Workers are this file in worker mode (``--worker URL``): each declares the same workflows (see
``build``) and calls ``app.serve(concurrency=--concurrency)`` until SIGTERM. Every measurement
gets a fresh store: a new SQLite file in a temporary folder, or a new PostgreSQL schema
``bench_<random>`` (dropped at the end). Times compared across processes are ``time.time()``
on the same host.

1. Throughput: K worker processes (``--workers``, default 1, 2 and 4) are started and have
   written their ready file (so interpreter start-up is not measured); then the bench enqueues
   ``--runs`` runs of ``--steps`` no-op steps each with ``app.start``. Seconds = from just before
   the first ``app.start`` to the ``updated_at`` of the last run to complete; steps/s = runs x
   steps / seconds (enqueueing is part of it, as it is of a service); each row is the median of
   ``--repeat`` samples, each on a fresh store and fleet. The floor beside it is
   the store's bare commit rate, measured in the same run just before: K threads, each with a
   connection of its own, doing autocommitted INSERTs of one journal row (into a separate
   store created by stalwart's migrations, so the table and indexes are stalwart's) for
   ``--floor-seconds``, at stalwart's durability (SQLite: WAL, ``synchronous=NORMAL``;
   PostgreSQL: ``synchronous_commit=on``). A step is at least one commit, so "of floor" is the
   share of the store's raw commit rate that the fleet turns into steps.
2. Latency, one idle worker process per store:
   - claim -> start: the time a run's first step ran - the time just before its ``app.start``;
     ``--samples`` runs one after the other, each awaited before the next;
   - event -> resume: ``--samples`` runs suspended in ``wait_for_event("go")`` are woken one at
     a time; the time the step after the wait ran - the time just before ``app.send_event``.
   p50 and p99 are nearest-rank percentiles. On PostgreSQL an idle worker wakes on
   LISTEN/NOTIFY; on SQLite it polls ``PRAGMA data_version`` every 10 ms.

    python bench/fleet.py [--runs 500] [--steps 10] [--repeat 3] [--workers 1,2,4]
                          [--samples 100] [--stores sqlite,postgres] [--postgres-url URL]

PostgreSQL rows need a reachable server (``--postgres-url``, default $STALWART_TEST_POSTGRES_URL
or postgresql://postgres@127.0.0.1:5432/test); without one they are skipped with a note. It is
a benchmark, not a test: it exits 0 whatever the figures (it fails only if a worker dies or
runs never finish).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import stalwart

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
STORES = ("sqlite", "postgres")
TARGET_WAKE_S = 0.100  # the target: an idle worker wakes within 100 ms
READY_TIMEOUT_S = 60.0
SETTLE_SECONDS = 0.5  # let fresh workers enter their claim loop before the clock starts
POLL_SECONDS = 0.1
EVENT_TIMEOUT_S = 3600.0

# The journal row a completed no-op step writes (as in bench/step_overhead.py).
STEP_INPUT = b'J{"args":[],"kwargs":{}}'
STEP_OUTPUT = b"Jnull"
COLUMNS = (
    "workflow_id, seq, position, kind, name, status, attempt, started_at, finished_at, "
    "input, output, error, by"
)
INSERT_SQLITE = f"INSERT INTO journal ({COLUMNS}) VALUES ({', '.join('?' * 13)})"
INSERT_POSTGRES = f"INSERT INTO journal ({COLUMNS}) VALUES ({', '.join(['%s'] * 13)})"


# -- the workflows (the bench and every worker process build them) ---------------------------


@dataclass
class Bench:
    """An app on one store with the benchmark's workflows."""

    app: stalwart.Stalwart
    steps: Any
    first_step: Any
    on_event: Any
    on_timer: Any


def build(url: str) -> Bench:
    """The app on ``url`` and its workflows, named explicitly so all processes agree."""
    app = stalwart.Stalwart(url)

    @app.step(name="bench_noop")
    def noop() -> None:
        return None

    @app.step(name="bench_stamp")
    def stamp() -> float:
        return time.time()

    @app.workflow(name="bench_steps")
    def steps(n: int) -> int:
        for _ in range(n):
            noop()
        return n

    @app.workflow(name="bench_first_step")
    def first_step() -> float:
        return stamp()

    @app.workflow(name="bench_on_event")
    def on_event() -> float:
        stalwart.wait_for_event("go", timeout=EVENT_TIMEOUT_S)
        return stamp()

    @app.workflow(name="bench_on_timer")
    def on_timer(delay: float) -> float:
        before = stamp()  # recorded, so a replay after the wake-up sees the same value
        stalwart.sleep(delay)
        return stamp() - (before + delay)  # how late the run resumed

    return Bench(app, steps, first_step, on_event, on_timer)


def serve(url: str, concurrency: int, ready: str) -> int:
    """The worker process: serve the benchmark's workflows until SIGTERM."""
    bench = build(url)
    try:
        partial = Path(f"{ready}.partial")
        partial.write_text(str(os.getpid()), "ascii")
        partial.replace(ready)  # atomic: the bench never reads a half-written file
        bench.app.serve(concurrency=concurrency)
    finally:
        bench.app.close()
    return 0


# -- stores -----------------------------------------------------------------------------------


@dataclass
class Stores:
    """Hands out fresh stores of one kind and removes them at the end."""

    kind: str
    folder: str
    postgres_url: str
    schemas: list[str] = field(default_factory=list)
    count: int = 0

    def fresh(self) -> str:
        """The URL of a new, empty store."""
        self.count += 1
        if self.kind == "sqlite":
            path = Path(self.folder) / f"store-{self.count}"
            path.mkdir()
            return f"sqlite:///{path}/stalwart.db"
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        self.schemas.append(schema)
        separator = "&" if "?" in self.postgres_url else "?"
        return f"{self.postgres_url}{separator}schema={schema}"

    def drop(self) -> None:
        """Drop every schema handed out (a no-op for SQLite: the folder goes with its files)."""
        if not self.schemas:
            return
        import psycopg

        deadline = time.monotonic() + 30  # the server may be restarting: try for a while
        while True:
            try:
                with psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=5) as conn:
                    while self.schemas:
                        conn.execute(f"DROP SCHEMA IF EXISTS {self.schemas[-1]} CASCADE")
                        self.schemas.pop()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    print(
                        f"note: could not drop the schemas {', '.join(self.schemas)}: "
                        f"{str(exc).strip().splitlines()[0]}"
                    )
                    return
                time.sleep(1)


def schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def postgres_version(url: str) -> str | None:
    """The server's version, or ``None`` (with the reason printed) if it can't be reached."""
    try:
        import psycopg
    except ImportError:
        print("note: psycopg is not installed (pip install 'stalwart[postgres]'): no PostgreSQL")
        return None
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            fsync = conn.execute("SHOW fsync").fetchone()
    except psycopg.Error as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"note: PostgreSQL at {url} is unreachable ({detail}): its rows are skipped")
        return None
    return (
        f"{str(version[0]).split()[0] if version else '?'} "
        f"(fsync={fsync[0] if fsync else '?'}, same host)"
    )


# -- the floor: bare autocommitted INSERTs ------------------------------------------------------


def journal_row(workflow_id: str, seq: int) -> tuple[Any, ...]:
    now = time.time()
    return (
        workflow_id,
        seq,
        str(seq),
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
    )


Writer = Callable[[str, threading.Barrier, float], tuple[int, float]]


def sqlite_writer(url: str) -> Writer:
    path = url.removeprefix("sqlite:///")

    def write(workflow_id: str, go: threading.Barrier, seconds: float) -> tuple[int, float]:
        conn = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
        try:
            conn.execute("PRAGMA synchronous = NORMAL")  # stalwart's durability="process"
            go.wait()
            return insert_for(
                lambda n: conn.execute(INSERT_SQLITE, journal_row(workflow_id, n)), seconds
            )
        finally:
            conn.close()

    return write


def postgres_writer(base_url: str, url: str) -> Writer:
    import psycopg

    options = f"-c search_path={schema_of(url)} -c synchronous_commit=on"

    def write(workflow_id: str, go: threading.Barrier, seconds: float) -> tuple[int, float]:
        with psycopg.connect(base_url, autocommit=True, options=options) as conn:
            go.wait()
            return insert_for(
                lambda n: conn.execute(INSERT_POSTGRES, journal_row(workflow_id, n)), seconds
            )

    return write


def insert_for(insert: Callable[[int], object], seconds: float) -> tuple[int, float]:
    """Call ``insert(1)``, ``insert(2)``, ... for ``seconds``: the count and the time taken."""
    start = time.perf_counter()
    until = start + seconds
    n = 0
    while time.perf_counter() < until:
        n += 1
        insert(n)
    return n, time.perf_counter() - start


def floor_rate(write: Writer, writers: int, seconds: float) -> float:
    """Commits per second of ``writers`` threads, each with its own connection, together."""
    results: list[tuple[int, float]] = []
    errors: list[BaseException] = []
    go = threading.Barrier(writers)  # connected, all of them: start inserting

    def work(i: int) -> None:
        try:
            results.append(write(f"floor-{writers}-{i}-{uuid.uuid4().hex[:6]}", go, seconds))
        except BaseException as exc:
            errors.append(exc)
            go.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"the floor writers failed: {errors[0]!r}") from errors[0]
    return sum(n for n, _ in results) / max(elapsed for _, elapsed in results)


# -- worker processes -------------------------------------------------------------------------


class Fleet:
    """``size`` worker processes serving one store."""

    def __init__(self, url: str, size: int, concurrency: int, folder: str) -> None:
        self.folder = Path(folder)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []
        self.ready: list[Path] = []
        try:
            for i in range(size):
                log = (self.folder / f"worker-{i}.log").open("wb")
                self.logs.append(log)
                ready = self.folder / f"worker-{i}.ready"
                ready.unlink(missing_ok=True)
                self.ready.append(ready)
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            os.path.abspath(__file__),
                            "--worker",
                            url,
                            "--concurrency",
                            str(concurrency),
                            "--ready",
                            str(ready),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=log,
                        cwd=folder,
                    )
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        time.sleep(SETTLE_SECONDS)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(path.exists() for path in self.ready):
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers were not ready in {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.02)

    def check(self) -> None:
        """Raise if a worker process died."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"worker {i} exited with code {proc.returncode}:\n{self.log_tail(i)}"
                )

    def log_tail(self, i: int, lines: int = 30) -> str:
        self.logs[i].flush()
        path = self.folder / f"worker-{i}.log"
        text = path.read_text("utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(the worker wrote nothing to stderr)"

    def warnings(self) -> str:
        """What the workers logged (stalwart logs warnings and errors only by default)."""
        return "\n".join(
            f"worker {i}: {line}"
            for i in range(len(self.procs))
            for line in self.log_tail(i, 5).splitlines()
            if not line.startswith("(the worker wrote nothing")
        )

    def stop(self) -> None:
        """SIGTERM to all (a graceful stop), then SIGKILL any that lingers."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


# -- measurements -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One throughput measurement: a fresh store, a fresh fleet, ``runs`` runs."""

    seconds: float  # from just before the first app.start to the last completion
    enqueue_seconds: float  # the app.start calls alone
    floor: float  # bare commits per second with as many writers as workers, just before


@dataclass(frozen=True)
class Throughput:
    """The medians of ``--repeat`` samples of one store and fleet size."""

    store: str
    workers: int
    runs: int
    steps: int
    samples: list[Sample]

    @property
    def seconds(self) -> float:
        return statistics.median(s.seconds for s in self.samples)

    @property
    def enqueue_seconds(self) -> float:
        return statistics.median(s.enqueue_seconds for s in self.samples)

    @property
    def floor(self) -> float:
        return statistics.median(s.floor for s in self.samples)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def spread(self) -> str:
        """The lowest and highest steps/s of the samples."""
        rates = [self.steps / s.seconds for s in self.samples]
        return f"{min(rates):.0f}-{max(rates):.0f}"


@dataclass(frozen=True)
class Latency:
    store: str
    claim: list[float]
    event: list[float]
    timer: list[float]
    start_call: list[float]
    send_call: list[float]


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def measure_throughput(
    stores: Stores, floor_url: str, workers: int, args: argparse.Namespace
) -> Sample:
    if stores.kind == "sqlite":
        write = sqlite_writer(floor_url)
    else:
        write = postgres_writer(stores.postgres_url, floor_url)
    floor = floor_rate(write, workers, args.floor_seconds)

    url = stores.fresh()
    bench = build(url)  # migrates the fresh store before any worker opens it
    fleet: Fleet | None = None
    n, s = args.runs, args.steps
    try:
        fleet = Fleet(url, workers, args.concurrency, stores.folder)
        first = time.time()
        t0 = time.perf_counter()
        for i in range(n):
            bench.app.start(bench.steps, s, workflow_id=f"tp-{i:06d}")
        enqueue = time.perf_counter() - t0
        deadline = time.monotonic() + 120 + n * s / 20
        while True:
            fleet.check()
            done = bench.app.list_workflows(status="completed", limit=n)
            if len(done) >= n:
                break
            if bench.app.list_workflows(status="failed", limit=1):
                raise RuntimeError(f"a run failed:\n{fleet.warnings()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(done)} of {n} runs completed in time")
            time.sleep(POLL_SECONDS)
        last = max(info.updated_at.timestamp() for info in done)
        logged = fleet.warnings()
    finally:
        if fleet is not None:
            fleet.stop()
        bench.app.close()
    if logged:
        print(f"  the workers logged:\n{logged}")
    sample = Sample(last - first, enqueue, floor)
    print(
        f"  {stores.kind}, {workers} worker(s): {n * s} steps in {sample.seconds:.2f} s "
        f"({n * s / sample.seconds:.0f} steps/s; the {n} app.start calls took {enqueue:.2f} s); "
        f"floor {floor:.0f} commits/s from {workers} writer(s)",
        flush=True,
    )
    return sample


def gap() -> None:
    """A random pause between samples, so they don't fall in step with the worker's polls."""
    time.sleep(random.uniform(0.02, 0.08))


def measure_latency(stores: Stores, args: argparse.Namespace) -> Latency:
    url = stores.fresh()
    bench = build(url)
    app = bench.app
    fleet: Fleet | None = None
    claim: list[float] = []
    event: list[float] = []
    timer: list[float] = []
    start_call: list[float] = []
    send_call: list[float] = []
    try:
        fleet = Fleet(url, 1, args.concurrency, stores.folder)
        # Warm up: the worker's first claims and the page cache, outside the samples.
        for i in range(3):
            app.start(bench.first_step, workflow_id=f"warm-{i}").result(timeout=60)
        for i in range(args.samples):
            gap()
            fleet.check()
            t0 = time.time()
            handle = app.start(bench.first_step, workflow_id=f"claim-{i:05d}")
            start_call.append(time.time() - t0)
            claim.append(float(handle.result(timeout=60)) - t0)

        handles = [
            app.start(bench.on_event, workflow_id=f"event-{i:05d}") for i in range(args.samples)
        ]
        deadline = time.monotonic() + 60 + args.samples / 10
        while len(app.list_workflows(status="suspended", limit=args.samples)) < args.samples:
            fleet.check()
            if time.monotonic() > deadline:
                raise RuntimeError("the event waiters never all suspended")
            time.sleep(POLL_SECONDS)
        time.sleep(SETTLE_SECONDS)
        for i, handle in enumerate(handles):
            gap()
            fleet.check()
            t0 = time.time()
            app.send_event(handle.workflow_id, "go", i)
            send_call.append(time.time() - t0)
            event.append(float(handle.result(timeout=60)) - t0)

        # Timers: runs that sleep durably, due one every 20 ms, so each wake-up is its own.
        sleepers = [
            app.start(bench.on_timer, 1.0 + i * 0.02, workflow_id=f"timer-{i:05d}")
            for i in range(args.samples)
        ]
        timer.extend(float(h.result(timeout=60 + args.samples)) for h in sleepers)
        logged = fleet.warnings()
    finally:
        if fleet is not None:
            fleet.stop()
        app.close()
    if logged:
        print(f"  the worker logged:\n{logged}")
    row = Latency(stores.kind, claim, event, timer, start_call, send_call)
    print(
        f"  {stores.kind}, 1 idle worker: claim->start p50 {ms(percentile(claim, 50))} "
        f"p99 {ms(percentile(claim, 99))} (app.start itself p50 "
        f"{ms(percentile(start_call, 50))}); event->resume p50 {ms(percentile(event, 50))} "
        f"p99 {ms(percentile(event, 99))} (app.send_event itself p50 "
        f"{ms(percentile(send_call, 50))}); timer->resume p50 {ms(percentile(timer, 50))} "
        f"p99 {ms(percentile(timer, 99))}",
        flush=True,
    )
    return row


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


# -- output -----------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]], left: int = 1) -> None:
    """Columns right-aligned but the first ``left``, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    print(line(header))
    for row in rows:
        print(line(row))


def print_throughput(rows: list[Throughput]) -> None:
    one = {r.store: r.steps_per_s for r in rows if r.workers == 1}
    table(
        [
            "store",
            "workers",
            "runs",
            "steps",
            "seconds",
            "enqueue s",
            "steps/s",
            "range",
            "vs 1 worker",
            "floor commits/s",
            "of floor",
        ],
        [
            [
                r.store,
                str(r.workers),
                str(r.runs),
                str(r.steps),
                f"{r.seconds:.2f}",
                f"{r.enqueue_seconds:.2f}",
                f"{r.steps_per_s:.0f}",
                r.spread,
                f"{r.steps_per_s / one[r.store]:.2f}x" if r.store in one else "-",
                f"{r.floor:.0f}",
                f"{r.steps_per_s / r.floor:.1%}",
            ]
            for r in rows
        ],
    )


def print_latency(rows: list[Latency]) -> None:
    table(
        [
            "store",
            "claim->start p50 ms",
            "p99 ms",
            "event->resume p50 ms",
            "p99 ms",
            "timer->resume p50 ms",
            "p99 ms",
            "samples",
        ],
        [
            [
                r.store,
                f"{percentile(r.claim, 50) * 1000:.1f}",
                f"{percentile(r.claim, 99) * 1000:.1f}",
                f"{percentile(r.event, 50) * 1000:.1f}",
                f"{percentile(r.event, 99) * 1000:.1f}",
                f"{percentile(r.timer, 50) * 1000:.1f}",
                f"{percentile(r.timer, 99) * 1000:.1f}",
                str(len(r.claim)),
            ]
            for r in rows
        ],
    )


# -- main -------------------------------------------------------------------------------------


def positive_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of ints") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more ints >= 1")
    return values


def store_names(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names or any(n not in STORES for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated subset of {STORES}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=500, help="runs per throughput sample (500)")
    parser.add_argument("--steps", type=int, default=10, help="no-op steps per run (10)")
    parser.add_argument(
        "--workers", type=positive_ints, default=[1, 2, 4], help="worker processes (1,2,4)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="concurrency of each worker process (8)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="samples per throughput row; median (3)"
    )
    parser.add_argument(
        "--samples", type=int, default=100, help="latency samples of each kind (100)"
    )
    parser.add_argument(
        "--floor-seconds", type=float, default=1.0, help="seconds of each floor figure (1)"
    )
    parser.add_argument(
        "--stores", type=store_names, default=list(STORES), help="sqlite,postgres (both)"
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
        help="a libpq URL of a database where the bench may create and drop schemas "
        "(default: $STALWART_TEST_POSTGRES_URL, else " + DEFAULT_POSTGRES_URL + ")",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="where the temporary SQLite files go (default: the system temp folder)",
    )
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--ready", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        if not args.ready:
            parser.error("--worker needs --ready PATH")
        return serve(args.worker, args.concurrency, args.ready)
    if min(args.runs, args.steps, args.concurrency, args.samples, args.repeat) < 1:
        parser.error("--runs, --steps, --concurrency, --repeat and --samples must be >= 1")
    if args.floor_seconds <= 0:
        parser.error("--floor-seconds must be > 0")

    began = time.perf_counter()
    where = os.path.abspath(args.dir or tempfile.gettempdir())
    kinds = list(args.stores)
    pg_version = postgres_version(args.postgres_url) if "postgres" in kinds else None
    if pg_version is None and "postgres" in kinds:
        kinds.remove("postgres")
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"stalwart {stalwart.__version__} fleet: Python {sys.version.split()[0]}, "
        f"SQLite {sqlite3.sqlite_version}"
        + (f", PostgreSQL {pg_version}" if pg_version else "")
        + f"; {os.cpu_count()} CPUs ({platform.machine()}, {platform.system()}), "
        f"load average {load} at start"
    )
    print(
        f"parameters: {args.runs} runs x {args.steps} no-op steps per throughput sample, "
        f"median of {args.repeat} samples, "
        f"workers {','.join(map(str, args.workers))}, concurrency {args.concurrency} per worker, "
        f"{args.samples} latency samples, floor over {args.floor_seconds:g} s; "
        f"SQLite files in {where}",
        flush=True,
    )

    throughput: list[Throughput] = []
    latency: list[Latency] = []
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-", dir=args.dir) as folder:
        for kind in kinds:
            sub = Path(folder) / kind
            sub.mkdir()
            stores = Stores(kind, str(sub), args.postgres_url)
            try:
                print(f"\n{kind}: throughput", flush=True)
                floor_url = stores.fresh()
                stalwart.Stalwart(floor_url).close()  # a store of its own, migrated, for the floor
                for workers in args.workers:
                    samples = [
                        measure_throughput(stores, floor_url, workers, args)
                        for _ in range(args.repeat)
                    ]
                    steps = args.runs * args.steps
                    throughput.append(Throughput(kind, workers, args.runs, steps, samples))
                print(f"{kind}: latency", flush=True)
                latency.append(measure_latency(stores, args))
            finally:
                stores.drop()

    print()
    print_throughput(throughput)
    print()
    print_latency(latency)
    print()
    for row in latency:
        for what, values in (
            ("a new run", row.claim),
            ("an event", row.event),
            ("a due timer", row.timer),
        ):
            p99 = percentile(values, 99)
            verdict = "MET" if p99 < TARGET_WAKE_S else "NOT MET"
            print(
                f"target: {what} wakes an idle worker within {TARGET_WAKE_S * 1000:.0f} ms "
                f"(p99), {row.store}: {verdict} ({ms(p99)})"
            )
    print(
        "notes: seconds = median over the samples, from just before the first app.start to\n"
        "  the last completion (enqueueing included; enqueue s = the app.start calls alone, from\n"
        "  one thread of the bench process while the workers already run); range = the lowest\n"
        "  and highest steps/s of the samples; floor = bare autocommitted one-row INSERTs into\n"
        "  stalwart's journal table from as many connections (threads) as workers; of floor =\n"
        "  steps/s / floor commits/s; latency: one idle worker process, nearest-rank percentiles."
    )
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"total {time.perf_counter() - began:.0f} s, load average {load} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
