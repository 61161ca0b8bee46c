"""Durable waits at scale on SQLite and PostgreSQL: what suspended runs cost a worker, and how
fast they wake.

Each part runs on each store (``--store``; PostgreSQL when ``--postgres-url`` or
$STALWART_TEST_POSTGRES_URL is set) and uses a fresh store and a fresh worker: a subprocess running
``app.serve(concurrency=--concurrency)`` on the workflows below. Runs are created with
``app.start`` from this (the bench) process; every time compared across the two processes is
``time.time()`` on the same host.

1. Suspended runs: ``--runs`` runs each blocked in ``stalwart.wait_for_event("go")``. The
   worker's RSS (``VmRSS``) and thread count (``Threads``) from ``/proc/PID/status`` are read
   when it is idle before any run exists, after the first tenth of the runs suspended, and once
   all of them are; the idle CPU the worker burns polling is read over a few seconds in both
   idle states. Targets: under 20 MB of RSS above idle, and no added threads.
2. Timer firing: ``--timers`` runs each ``stalwart.sleep`` until the same whole second (the due
   epoch is an argument; the run sleeps ``due - stalwart.now()``), then a step records
   ``time.time()``. Lag = that time - due. Target: p99 under 1 s.
3. Event to resume: ``--events`` runs wait on ``"go"``; the bench sends the events one at a time
   at ``--event-rate`` per second, noting ``time.time()`` once ``app.send_event`` returned (its
   transaction committed), and the run's next step records ``time.time()``. Latency = resume -
   commit. Targets: p50 under 5 ms, p99 under 100 ms. Floor: the bare commit-to-observe
   latency of the store's change signal across two processes (``wake_floors.py``).
4. Event to result, as the caller sees it: ``--callers`` runs wait on ``"go"``; one at a time,
   the bench sends the event and calls ``Handle.result()``, timing from just before
   ``send_event`` to the moment ``result`` returns, beside the engine's own send-to-resume
   time of the same run (what a caller waits on top of the engine is the difference), and from
   the run's finishing transaction (its row's ``updated_at``, taken just before the commit) to
   ``result`` returning. Target: finish -> result p50 under 2 ms; floor as in part 3.

    python bench/waits.py [--runs 10000] [--timers 1000] [--events 200] [--only events]
        [--store sqlite] [--store postgres] [--postgres-url URL]

It is a benchmark, not a test: it exits 0 whether or not the targets are met (it fails only if
the worker dies or the runs never get where they should).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fleet import Stores
from wake_floors import CommitClock, bare_insert, commit_to_observe, round_trip

import stalwart

TARGET_RSS_MB = 4.0
TARGET_TIMER_P99_S = 1.0
TARGET_EVENT_P99_S = 0.100
TARGET_EVENT_P50_S = 0.005
PARTS = ("suspended", "timers", "events", "caller")
TARGET_CALLER_P50_S = 0.002
POLL_SECONDS = 0.25
SETTLE_SECONDS = 1.0  # let a worker finish what it was doing before its memory is read
CPU_WINDOW_SECONDS = 3.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- the workflows (the bench and the worker process both build them) ------------------------


@dataclass
class Bench:
    """An app on one store with the benchmark's workflows."""

    app: stalwart.Stalwart
    on_event: Any
    timer: Any


def build(url: str) -> Bench:
    """The app on ``url`` and its workflows, named explicitly so both processes agree."""
    app = stalwart.Stalwart(url)

    @app.step(name="bench_stamp")
    def stamp() -> float:
        return time.time()

    @app.workflow(name="bench_on_event")
    def on_event() -> float:
        stalwart.wait_for_event("go")
        return stamp()

    @app.workflow(name="bench_timer")
    def timer(due: float) -> float:
        started = stalwart.now().timestamp()
        stalwart.sleep(max(0.0, due - started))
        return stamp()

    return Bench(app, on_event, timer)


def serve(url: str, concurrency: int) -> int:
    """The worker process: serve the benchmark's workflows until SIGTERM."""
    bench = build(url)
    print("ready", flush=True)
    try:
        bench.app.serve(concurrency=concurrency)
    finally:
        bench.app.close()
    return 0


# -- the worker subprocess and what /proc says about it --------------------------------------


@dataclass(frozen=True)
class Sample:
    """The worker's resident memory (MB) and thread count at one moment."""

    rss_mb: float
    threads: int


class Worker:
    """A worker subprocess on one store."""

    def __init__(self, url: str, folder: str, concurrency: int) -> None:
        self.log_path = Path(folder) / "worker.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--serve",
                url,
                "--concurrency",
                str(concurrency),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=folder,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the worker did not start:\n{self.log_tail()}")
        time.sleep(SETTLE_SECONDS)  # past imports, the first claim polls and its page cache

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check(self) -> None:
        """Raise if the worker process died."""
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"the worker exited with code {self.proc.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        self._log.flush()
        text = self.log_path.read_text("utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(the worker wrote nothing to stderr)"

    def warnings(self) -> int:
        """How many lines the worker logged (stalwart logs warnings and errors only here)."""
        self._log.flush()
        return len(self.log_path.read_text("utf-8", errors="replace").splitlines())

    def sample(self) -> Sample:
        """The median of a few readings of ``/proc/PID/status``, a moment apart."""
        readings = []
        for i in range(3):
            if i:
                time.sleep(0.2)
            self.check()
            fields = {}
            with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    fields[key] = value.split()
            readings.append((int(fields["VmRSS"][0]) / 1024, int(fields["Threads"][0])))
        return Sample(statistics.median(r for r, _ in readings), max(t for _, t in readings))

    def cpu_seconds(self) -> float:
        """User plus system CPU the worker has used so far."""
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rfind(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def idle_cpu_percent(self, window: float = CPU_WINDOW_SECONDS) -> float:
        """The share of one core the worker uses over ``window`` seconds of doing nothing."""
        before, start = self.cpu_seconds(), time.monotonic()
        time.sleep(window)
        return 100 * (self.cpu_seconds() - before) / (time.monotonic() - start)

    def stop(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


# -- helpers --------------------------------------------------------------------------------


def count(app: stalwart.Stalwart, status: str, limit: int) -> int:
    return len(app.list_workflows(status=status, limit=limit))


def wait_for(
    app: stalwart.Stalwart, worker: Worker, status: str, n: int, *, timeout: float, what: str
) -> float:
    """Poll until ``n`` runs have ``status``; returns ``time.time()`` when seen."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        worker.check()
        seen = count(app, status, n)
        if seen >= n:
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what}: only {seen} of {n} runs are {status} after {timeout:.0f} s\n"
                f"{worker.log_tail()}"
            )
        time.sleep(POLL_SECONDS)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.{1 if seconds >= 0.001 else 3}f} ms"


def results(app: stalwart.Stalwart, ids: list[str]) -> list[float]:
    """Each run's result (the ``time.time()`` its stamp step recorded)."""
    return [float(app.handle(wid).result(timeout=30)) for wid in ids]


@dataclass
class Report:
    """The summary table: metric | value | target | met."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    store: str = ""

    def add(self, metric: str, value: str, target: str = "-", met: bool | None = None) -> None:
        metric = f"{self.store}: {metric}" if self.store and not metric.startswith(" ") else metric
        self.rows.append((metric, value, target, "-" if met is None else "yes" if met else "NO"))

    def print(self) -> None:
        header = ("metric", "value", "target", "met")
        widths = [max(len(r[i]) for r in [header, *self.rows]) for i in range(4)]
        line = "  ".join("-" * w for w in widths)
        print(line)
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        print(line)
        for row in self.rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        print(line)
        for note in self.notes:
            print(f"note: {note}")


# -- the three parts -------------------------------------------------------------------------


def part_suspended(folder: str, args: argparse.Namespace, report: Report) -> None:
    n = args.runs
    warm = max(1, n // 10)
    url = args.stores.fresh()
    bench = build(url)
    worker = Worker(url, folder, args.concurrency)
    try:
        idle = worker.sample()
        idle_cpu = worker.idle_cpu_percent()
        print(
            f"  idle worker (no runs): RSS {idle.rss_mb:.1f} MB, {idle.threads} threads, "
            f"CPU {idle_cpu:.1f}% of a core"
        )
        creating = 0.0
        t0 = time.perf_counter()
        for i in range(warm):
            bench.app.start(bench.on_event, workflow_id=f"sus-{i:06d}")
        creating += time.perf_counter() - t0
        wait_for(
            bench.app, worker, "suspended", warm, timeout=60 + warm / 10, what="suspended runs"
        )
        time.sleep(SETTLE_SECONDS)
        first = worker.sample()
        print(f"  first {warm} suspended: RSS {first.rss_mb:.1f} MB, {first.threads} threads")
        t1 = time.perf_counter()
        w1 = time.time()
        for i in range(warm, n):
            bench.app.start(bench.on_event, workflow_id=f"sus-{i:06d}")
        creating += time.perf_counter() - t1
        created = time.time()
        done = wait_for(
            bench.app, worker, "suspended", n, timeout=60 + n / 10, what="suspended runs"
        )
        rest = n - warm
        rate = rest / (done - w1) if rest else float("nan")
        print(
            f"  app.start x{n}: {creating:.1f} s ({n / creating:.0f}/s, one thread, the worker "
            f"claiming meanwhile); the last {rest} were all suspended "
            f"{done - created:.1f} s after the last start ({rate:.0f} runs/s start-to-suspended)"
        )
        time.sleep(SETTLE_SECONDS)
        full = worker.sample()
        full_cpu = worker.idle_cpu_percent()
        print(
            f"  all {n} suspended: RSS {full.rss_mb:.1f} MB, {full.threads} threads, "
            f"CPU {full_cpu:.1f}% of a core while idle"
        )
        if worker.warnings():
            print(f"  the worker logged:\n{worker.log_tail(10)}")
    finally:
        worker.stop()
        bench.app.close()

    rss = full.rss_mb - idle.rss_mb
    threads = full.threads - idle.threads
    report.add(
        f"RSS added by {n} suspended runs",
        f"{rss:.1f} MB",
        f"< {TARGET_RSS_MB:.0f} MB",
        rss < TARGET_RSS_MB,
    )
    report.add(f"threads added by {n} suspended runs", f"{threads:+d}", "0", threads <= 0)
    if rest:
        per_k = (full.rss_mb - first.rss_mb) / rest * 1000
        report.add(f"  RSS per 1k suspended runs ({warm}->{n})", f"{per_k:.2f} MB")
        report.add(f"  threads added {warm}->{n} suspended", f"{full.threads - first.threads:+d}")
    if rest and threads > 0 and first.threads - idle.threads == threads:
        report.notes.append(
            f"the {threads} added threads all appeared with the first {warm} runs and none "
            f"after: the worker's run pool (concurrency {args.concurrency}) and lease keeper "
            "start their threads on first use; suspended runs hold none"
        )
    report.add("  app.start rate (bench, 1 thread)", f"{n / creating:.0f} runs/s")
    if rest:
        report.add("  start -> suspended throughput", f"{rate:.0f} runs/s")
    report.add(f"  idle worker CPU: 0 / {n} suspended", f"{idle_cpu:.1f}% / {full_cpu:.1f}%")


def part_timers(folder: str, args: argparse.Namespace, report: Report) -> None:
    n = args.timers
    url = args.stores.fresh()
    bench = build(url)
    worker = Worker(url, folder, args.concurrency)
    try:
        lead = args.timer_lead if args.timer_lead is not None else 3 + n / 250
        due = float(math.ceil(time.time() + lead))
        ids = [f"tmr-{i:06d}" for i in range(n)]
        t0 = time.perf_counter()
        for wid in ids:
            bench.app.start(bench.timer, due, workflow_id=wid)
        creating = time.perf_counter() - t0
        armed = wait_for(bench.app, worker, "suspended", n, timeout=60 + n / 10, what="timers")
        print(
            f"  {n} timers started in {creating:.1f} s, all armed {due - armed:.1f} s "
            f"before they are due"
        )
        if armed > due:
            report.notes.append(
                f"the timers were armed only {armed - due:.1f} s after they were due: the lag "
                "includes arming; raise --timer-lead"
            )
        limit = 60 + n / 10 + max(0.0, due - time.time())
        wait_for(bench.app, worker, "completed", n, timeout=limit, what="timers")
        lags = [woke - due for woke in results(bench.app, ids)]
        if worker.warnings():
            print(f"  the worker logged:\n{worker.log_tail(10)}")
    finally:
        worker.stop()
        bench.app.close()

    early = sum(1 for lag in lags if lag < 0)
    p50, p99, first, worst = percentile(lags, 50), percentile(lags, 99), min(lags), max(lags)
    drain = n / (worst - first) if worst > first else float("inf")
    print(
        f"  firing lag: first {ms(first)}, p50 {ms(p50)}, p99 {ms(p99)}, last {ms(worst)}, "
        f"early {early}; {drain:.0f} wakes/s from the first to the last"
    )
    report.add(f"timer lag p50 ({n} due in one second)", ms(p50))
    report.add(
        f"timer lag p99 ({n} due in one second)",
        ms(p99),
        f"< {TARGET_TIMER_P99_S:.0f} s",
        p99 < TARGET_TIMER_P99_S,
    )
    report.add("  timer lag min / max (first / last fired)", f"{ms(first)} / {ms(worst)}")
    if worst > first:
        report.add("  wake rate, first to last timer", f"{drain:.0f} runs/s")
    report.add("  timers fired before due", str(early), "0", early == 0)


def part_events(folder: str, args: argparse.Namespace, report: Report) -> None:
    n = args.events
    url = args.stores.fresh()
    bench = build(url)
    worker = Worker(url, folder, args.concurrency)
    try:
        ids = [f"evt-{i:06d}" for i in range(n)]
        for wid in ids:
            bench.app.start(bench.on_event, workflow_id=wid)
        wait_for(bench.app, worker, "suspended", n, timeout=60 + n / 10, what="event waiters")
        time.sleep(SETTLE_SECONDS)
        sent: list[float] = []
        calls: list[float] = []
        interval = 1 / args.event_rate
        start = time.monotonic()
        for i, wid in enumerate(ids):
            pause = start + i * interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            t = time.perf_counter()
            bench.app.send_event(wid, "go", i)
            sent.append(time.time())  # committed
            calls.append(time.perf_counter() - t)
        wait_for(bench.app, worker, "completed", n, timeout=60, what="event waiters")
        latency = [resumed - s for resumed, s in zip(results(bench.app, ids), sent, strict=True)]
        if worker.warnings():
            print(f"  the worker logged:\n{worker.log_tail(10)}")
    finally:
        worker.stop()
        bench.app.close()

    p50, p99 = percentile(latency, 50), percentile(latency, 99)
    floor = commit_to_observe(args.stores.kind, folder, args.postgres_url)
    insert = bare_insert(args.stores.kind, folder, args.postgres_url)
    print(
        f"  {n} events at {args.event_rate:g}/s: commit -> resume p50 {ms(p50)}, p99 {ms(p99)}, "
        f"max {ms(max(latency))}; app.send_event itself p50 {ms(statistics.median(calls))}; "
        f"floor (bare commit sent -> seen in another process) {ms(floor)}, "
        f"ratio {p50 / floor:.0f}x; "
        f"one bare INSERT commit p50 {ms(insert)} (a resume commits at least twice: its claim, "
        f"its step), ratio {p50 / insert:.1f}x"
    )
    report.add(
        f"event commit->resume p50 ({n} at {args.event_rate:g}/s)",
        ms(p50),
        f"< {TARGET_EVENT_P50_S * 1000:.0f} ms",
        p50 < TARGET_EVENT_P50_S,
    )
    report.add("  floor: bare commit sent -> seen / ratio", f"{ms(floor)} / {p50 / floor:.0f}x")
    report.add("  one bare INSERT commit / ratio", f"{ms(insert)} / {p50 / insert:.1f}x")
    if args.stores.kind == "postgres":
        trip = round_trip(args.postgres_url)
        print(f"  one round trip (SELECT 1) p50 {ms(trip)}: the resume is {p50 / trip:.0f} of them")
        report.add("  one round trip (SELECT 1) / ratio", f"{ms(trip)} / {p50 / trip:.0f}x")
    report.add(
        f"event commit->resume p99 ({n} at {args.event_rate:g}/s)",
        ms(p99),
        f"< {TARGET_EVENT_P99_S * 1000:.0f} ms",
        p99 < TARGET_EVENT_P99_S,
    )
    report.add("  app.send_event call p50", ms(statistics.median(calls)))


def _caller_latencies(
    bench: Bench, ids: list[str], clock: CommitClock | None
) -> tuple[list[float], list[float], list[float]]:
    """One at a time: send ``go`` and wait in ``Handle.result``; (send -> result returned,
    send -> the engine's resume, finishing commit -> result returned) for each run."""
    caller: list[float] = []
    engine: list[float] = []
    finish: list[float] = []
    for i, wid in enumerate(ids):
        handle = bench.app.handle(wid)
        time.sleep(0.02)  # the worker idle in between
        sent = time.time()
        bench.app.send_event(wid, "go", i)
        resumed = float(handle.result(timeout=30))
        returned = time.time()
        caller.append(returned - sent)
        engine.append(resumed - sent)
        committed = clock.first_after(resumed, 1.0) if clock else None
        finish.append(returned - (committed or bench.app._views.row(wid).updated_at))
    return caller, engine, finish


def part_caller(folder: str, args: argparse.Namespace, report: Report) -> None:
    from stalwart._worker import Worker as InProcessWorker

    n = args.callers
    rows = []
    # In one process (the worker a thread of the caller's app, as app.serve beside a web
    # handler), then with the worker in a process of its own.
    for label in ("worker in the caller's process", "worker in another process"):
        url = args.stores.fresh()
        bench = build(url)
        ids = [f"call-{i:06d}" for i in range(n)]
        if label.endswith("another process"):
            worker: Any = Worker(url, folder, args.concurrency)
            stop = worker.stop
        else:
            worker = None
            local = InProcessWorker(bench.app._driver, concurrency=args.concurrency)
            thread = threading.Thread(target=local.serve, daemon=True)
            thread.start()

            def stop(local: Any = local, thread: threading.Thread = thread) -> None:
                local.stop()
                thread.join(timeout=30)

        try:
            for wid in ids:
                bench.app.start(bench.on_event, workflow_id=wid)
            if worker is not None:
                wait_for(bench.app, worker, "suspended", n, timeout=60 + n / 10, what="waiters")
            else:
                while count(bench.app, "suspended", n) < n:
                    time.sleep(POLL_SECONDS)
            time.sleep(SETTLE_SECONDS)
            clock = CommitClock(url) if args.stores.kind == "postgres" else None
            try:
                caller, engine, finish = _caller_latencies(bench, ids, clock)
            finally:
                if clock is not None:
                    clock.close()
        finally:
            stop()
            bench.app.close()
        c50, e50, f50 = percentile(caller, 50), percentile(engine, 50), percentile(finish, 50)
        print(
            f"  {label}: send -> Handle.result() p50 {ms(c50)}, p99 "
            f"{ms(percentile(caller, 99))}; send -> engine resume p50 {ms(e50)}; finishing "
            f"commit -> result p50 {ms(f50)}, p99 {ms(percentile(finish, 99))}"
        )
        rows.append((label, c50, e50, f50))
    floor = commit_to_observe(args.stores.kind, folder, args.postgres_url)
    print(f"  floor (bare commit sent -> seen in another process) p50 {ms(floor)}")
    if args.stores.kind == "postgres":
        report.notes.append(
            "PostgreSQL's finishing commit is when a LISTENing connection of the bench got the "
            "run's notification (the floor's delivery time after the commit is not removed)"
        )
    for (_label, c50, e50, f50), short in zip(rows, ("one process", "two processes"), strict=True):
        report.add(
            f"finish commit->Handle.result p50, {short} ({n})",
            ms(f50),
            f"< {TARGET_CALLER_P50_S * 1000:.0f} ms",
            f50 < TARGET_CALLER_P50_S,
        )
        report.add("  floor / ratio", f"{ms(floor)} / {f50 / floor:.0f}x")
        report.add("  event->Handle.result p50 (of which engine resume)", f"{ms(c50)} ({ms(e50)})")


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Durable waits at scale on SQLite and PostgreSQL: what suspended runs cost "
        "a worker, and how fast they wake (the module's docstring says how each part is timed)."
    )
    parser.add_argument("--runs", type=int, default=10_000, help="suspended runs (10000)")
    parser.add_argument("--timers", type=int, default=1000, help="timers due at once (1000)")
    parser.add_argument("--events", type=int, default=200, help="events sent (200)")
    parser.add_argument("--callers", type=int, default=200, help="caller-side events (200)")
    parser.add_argument("--event-rate", type=float, default=20.0, help="events per second (20)")
    parser.add_argument("--concurrency", type=int, default=8, help="worker concurrency (8)")
    parser.add_argument(
        "--timer-lead",
        type=float,
        default=None,
        help="seconds from the first start to the timers' due second "
        "(default 3 + timers/250: enough to arm them all first)",
    )
    parser.add_argument(
        "--only", action="append", choices=PARTS, help="run only this part (repeatable)"
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="where the temporary databases go (default: the system temp folder)",
    )
    parser.add_argument(
        "--store",
        action="append",
        choices=("sqlite", "postgres"),
        help="which store (repeatable; default: SQLite, and PostgreSQL when a URL is set)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL"),
        help="a PostgreSQL database (default: $STALWART_TEST_POSTGRES_URL)",
    )
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.concurrency)
    counts = (args.runs, args.timers, args.events, args.callers, args.concurrency)
    if min(counts) < 1 or args.event_rate <= 0:
        parser.error("counts, --concurrency and --event-rate must be positive")
    if not Path("/proc/self/status").exists():
        parser.error("this benchmark reads /proc/PID/status: it needs Linux")

    where = os.path.abspath(args.dir or tempfile.gettempdir())
    print(
        f"stalwart {stalwart.__version__} durable waits: worker concurrency {args.concurrency}, "
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, DBs in {where}",
        flush=True,
    )
    report = Report()
    parts = {
        "suspended": (f"1. {args.runs} runs suspended on wait_for_event", part_suspended),
        "timers": (f"2. {args.timers} timers due in the same second", part_timers),
        "events": (f"3. event -> resume latency, {args.events} events", part_events),
        "caller": (f"4. event -> Handle.result latency, {args.callers} events", part_caller),
    }
    kinds = args.store or (["sqlite", "postgres"] if args.postgres_url else ["sqlite"])
    if "postgres" in kinds and not args.postgres_url:
        parser.error("--store postgres needs --postgres-url or $STALWART_TEST_POSTGRES_URL")
    for kind in kinds:
        report.store = "SQLite" if kind == "sqlite" else "PostgreSQL"
        for name in PARTS:
            if args.only and name not in args.only:
                continue
            title, run = parts[name]
            print(f"\n{title} ({report.store})", flush=True)
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="stalwart-bench-", dir=args.dir) as folder:
                args.stores = report_store = Stores(kind, folder, args.postgres_url or "")
                try:
                    run(folder, args, report)
                finally:
                    report_store.drop()
            print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    print()
    report.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
