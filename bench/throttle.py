"""A fleet of agents waits out a provider's throttle window: wall time against the ideal, HTTP
calls and attempts per run, dead letters.

The provider is ``tests/fake_provider.py``, an OpenAI-compatible server in a thread of this
process; every ordinary answer takes ``--latency`` seconds. ``--workers`` worker processes
(this file in worker mode, ``--worker URL``, each calling ``app.serve(concurrency=...)`` until
SIGTERM) serve one store: a SQLite file, and a PostgreSQL schema of its own when a server
answers. ``--agents`` runs are started at once with ``app.start``; each makes ``--calls``
model calls, one step each, with the openai SDK (``max_retries=0``) under
``stalwart.Retry.llm()``. Each request names its run (``x-run-id``), so the server counts
calls per run.

Per store, in the same fleet:

1. baseline: the agents run with no throttling. Seconds = from just before the first
   ``app.start`` to the ``updated_at`` of the last run to complete.
2. throttled: the same, with a ``--window`` second throttle window beginning half the
   baseline's seconds after the first ``app.start`` (the middle of the run): every request
   inside it gets 429 with ``Retry-After`` = the seconds left in the window, rounded up (with
   ``--millis``, also ``retry-after-ms``, which stalwart prefers).
   Ideal = baseline seconds + window: the agents lose the window and nothing else. Ratio =
   seconds / ideal.

Calls per run are counted at the server; attempts per run are the journal's (``app.usage``);
"in window" is a run's calls inside the window (1 each is no waste); "resumed" is how long
after the window's end a run's first call after it arrived (p50 and max: the wait was the
server's if it is small and positive); durable = runs whose wait was a durable timer (a wait
over 5 s; a window of 5 s or less is waited out in the worker's threads). Dead letters are runs
that did not complete (``failed``, the dead-letter queue, or ``needs_attention``): the bench
exits 1 if there is any.

``--async`` makes the agents async (``openai.AsyncOpenAI`` in async steps): their waits of 5 s
or less sleep in a thread of asyncio's default executor, min(32, CPUs + 4) threads, so on a
small machine they come back in turn, long after the window (the strict xfail
``test_async_runs_waiting_out_a_throttle_window_all_come_back_when_it_ends``).

    python bench/throttle.py [--agents 50] [--calls 4] [--workers 2] [--window 5]
                             [--latency 0.2] [--async] [--millis]
                             [--stores sqlite,postgres] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import stalwart

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))  # the fake provider lives with the tests

from fleet import DEFAULT_POSTGRES_URL, STORES, Stores, postgres_version, table  # noqa: E402

from fake_provider import FakeProvider, Window, fake_provider  # noqa: E402

READY_TIMEOUT_S = 60.0
RUNS_TIMEOUT_S = 120.0
SETTLE_SECONDS = 0.5  # let fresh workers enter their claim loop before the clock starts
POLL_SECONDS = 0.05
STEP_TIMEOUT_S = 30.0
SERVER_SET = re.compile(r"\[(Retry-After|retry-after-ms): [^]]*\]$")  # the journal says so
TERMINAL = frozenset({"completed", "failed", "cancelled", "needs_attention"})


# -- the agent (the bench and every worker process build it) ---------------------------------


def build(url: str, provider_url: str, use_async: bool = False) -> tuple[stalwart.Stalwart, Any]:
    """The app on ``url`` and its agent workflow, named explicitly so all processes agree;
    with ``use_async``, an async workflow whose steps use ``openai.AsyncOpenAI``."""
    import openai

    app = stalwart.Stalwart(url)
    retry = stalwart.Retry.llm()
    if use_async:
        clients: list[openai.AsyncOpenAI] = []  # made on the app's loop, which it is bound to

        @app.step(name="throttle_chat", retry=retry, timeout=STEP_TIMEOUT_S)
        async def chat_async(turn: int) -> str:
            if not clients:
                clients.append(
                    openai.AsyncOpenAI(base_url=provider_url, api_key="bench", max_retries=0)
                )
            completion = await clients[0].chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": f"turn {turn}"}],
                extra_headers={"x-run-id": stalwart.workflow_id()},
            )
            return completion.choices[0].message.content or ""

        @app.workflow(name="throttle_agent")
        async def agent_async(calls: int) -> int:
            for turn in range(calls):
                await chat_async(turn)
            return calls

        return app, agent_async

    client = openai.OpenAI(base_url=provider_url, api_key="bench", max_retries=0)

    @app.step(name="throttle_chat", retry=retry, timeout=STEP_TIMEOUT_S)
    def chat(turn: int) -> str:
        completion = client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": f"turn {turn}"}],
            extra_headers={"x-run-id": stalwart.workflow_id()},
        )
        return completion.choices[0].message.content or ""

    @app.workflow(name="throttle_agent")
    def agent(calls: int) -> int:
        for turn in range(calls):
            chat(turn)
        return calls

    return app, agent


def serve(url: str, provider_url: str, concurrency: int, ready: str, use_async: bool) -> int:
    """The worker process: serve the agent until SIGTERM."""
    app, _ = build(url, provider_url, use_async)
    try:
        partial = Path(f"{ready}.partial")
        partial.write_text(str(os.getpid()), "ascii")
        partial.replace(ready)  # atomic: the bench never reads a half-written file
        app.serve(concurrency=concurrency)
    finally:
        app.close()
    return 0


# -- worker processes -------------------------------------------------------------------------


class Fleet:
    """``size`` worker processes serving one store."""

    def __init__(self, url: str, provider_url: str, args: argparse.Namespace, folder: Path):
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []
        try:
            ready = []
            for i in range(args.workers):
                self.logs.append((folder / f"worker-{i}.log").open("wb"))
                ready.append(folder / f"worker-{i}.ready")
                command = [sys.executable, __file__, "--worker", url, "--provider", provider_url]
                command += ["--concurrency", str(args.concurrency), "--ready", str(ready[-1])]
                command += ["--async"] if args.use_async else []
                self.procs.append(
                    subprocess.Popen(
                        command, stdout=subprocess.DEVNULL, stderr=self.logs[-1], cwd=folder
                    )
                )
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not all(path.exists() for path in ready):
                self.check()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the workers were not ready in {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.02)
        except BaseException:
            self.stop()
            raise
        time.sleep(SETTLE_SECONDS)

    def check(self) -> None:
        """Raise if a worker process died."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise RuntimeError(f"worker {i} exited with code {proc.returncode}:\n{self.log(i)}")

    def log(self, i: int) -> str:
        self.logs[i].flush()
        return (self.folder / f"worker-{i}.log").read_text("utf-8", errors="replace")

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


# -- one pass: the agents, with or without a throttle window ----------------------------------


@dataclass(frozen=True)
class Pass:
    """What one pass of ``agents`` runs measured."""

    store: str
    label: str
    seconds: float
    calls: list[int]  # HTTP calls per run, at the server
    attempts: list[int]  # step attempts per run, in the journal
    in_window: list[int]  # calls per run inside the window
    resumed: list[float]  # per run: its first call after the window - the window's end
    durable: int  # runs that waited on a durable timer
    failed: int  # failed attempts
    directed: int  # failed attempts whose delay the server set (Retry-After)
    dead: int  # runs that did not complete


def run_pass(
    app: stalwart.Stalwart,
    agent: Any,
    provider: FakeProvider,
    fleet: Fleet,
    *,
    store: str,
    label: str,
    args: argparse.Namespace,
    window_after: float | None = None,
) -> Pass:
    """Start ``--agents`` runs at once and wait for all; with ``window_after``, a throttle
    window of ``--window`` s begins that long after the first start."""
    ids = [f"{store}-{label}-{i:03d}" for i in range(args.agents)]  # unique at the server
    window: Window | None = None
    t0 = time.time()
    if window_after is not None:
        window = provider.throttle(args.window, after=window_after, millis=args.millis)
    for wid in ids:
        app.start(agent, args.calls, workflow_id=wid)
    deadline = time.monotonic() + RUNS_TIMEOUT_S
    rows: dict[str, stalwart.WorkflowInfo] = {}
    while True:
        fleet.check()
        listed = app.list_workflows(name="throttle_agent", limit=10 * args.agents)
        rows = {r.workflow_id: r for r in listed if r.workflow_id in ids}
        if len(rows) == len(ids) and all(r.status in TERMINAL for r in rows.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: the runs did not all end in {RUNS_TIMEOUT_S:.0f} s")
        time.sleep(POLL_SECONDS)
    seconds = max(r.updated_at.timestamp() for r in rows.values()) - t0

    calls, attempts, in_window, resumed = [], [], [], []
    durable = failed = directed = 0
    for wid in ids:
        made = provider.calls_of(wid)
        calls.append(len(made))
        attempts.append(app.usage(wid).attempts)
        journal = app.journal(wid)
        durable += any(e.kind == "run" and e.name == "suspended" for e in journal)
        errors = [e.error or "" for e in journal if e.kind == "step" and e.status == "failed"]
        failed += len(errors)
        directed += sum(1 for error in errors if SERVER_SET.search(error))
        if window is not None:
            in_window.append(sum(1 for c in made if c.throttled))
            after = [c.at for c in made if c.at >= window.end]
            if after:
                resumed.append(min(after) - window.end)
    dead = sum(1 for r in rows.values() if r.status != "completed")
    row = Pass(
        store, label, seconds, calls, attempts, in_window, resumed, durable, failed, directed, dead
    )
    print(
        f"  {store} {label}: {seconds:.2f} s, calls/run mean {statistics.fmean(calls):.2f} "
        f"max {max(calls)}, dead letters {dead}",
        flush=True,
    )
    return row


def measure(
    kind: str, stores: Stores, provider: FakeProvider, args: argparse.Namespace
) -> tuple[Pass, Pass]:
    """The baseline and the throttled pass on one fresh store and fleet."""
    url = stores.fresh()
    app, agent = build(url, provider.url, args.use_async)
    fleet: Fleet | None = None
    try:
        fleet = Fleet(url, provider.url, args, Path(stores.folder))
        # Warm up: the workers' first claims, their HTTP clients and the page cache.
        passes = {"app": app, "agent": agent, "provider": provider, "fleet": fleet, "store": kind}
        run_pass(**passes, label="warm-up", args=_warm(args))
        base = run_pass(**passes, label="baseline", args=args)
        throttled = run_pass(**passes, label="throttled", args=args, window_after=base.seconds / 2)
    finally:
        if fleet is not None:
            fleet.stop()
        app.close()
    return base, throttled


def _warm(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "agents": args.workers * 2, "calls": 1})


# -- output -----------------------------------------------------------------------------------


def spread(values: list[int]) -> str:
    return f"{statistics.fmean(values):.2f} / {max(values)}" if values else "-"


def print_rows(rows: list[tuple[Pass, Pass]], window: float) -> None:
    out = []
    for base, hit in rows:
        ideal = base.seconds + window
        out.append(
            [
                base.store,
                f"{base.seconds:.2f}",
                f"{hit.seconds:.2f}",
                f"{ideal:.2f}",
                f"{hit.seconds / ideal:.3f}",
                spread(base.calls),
                spread(hit.calls),
                spread(hit.attempts),
                spread(hit.in_window),
                f"{statistics.median(hit.resumed) * 1000:.0f} / {max(hit.resumed) * 1000:.0f}"
                if hit.resumed
                else "-",
                f"{hit.failed} / {hit.directed}",
                str(hit.durable),
                str(base.dead + hit.dead),
            ]
        )
    table(
        [
            "store",
            "baseline s",
            "wall s",
            "ideal s",
            "ratio",
            "calls/run base",
            "calls/run",
            "attempts/run",
            "in window",
            "resumed ms p50 / max",
            "failed att. / server-set",
            "durable",
            "dead letters",
        ],
        out,
    )


# -- main -------------------------------------------------------------------------------------


def store_names(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names or any(n not in STORES for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated subset of {STORES}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=50, help="concurrent agents (50)")
    parser.add_argument("--calls", type=int, default=4, help="model calls per agent (4)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="concurrency of each worker process (default: agents / workers, rounded up)",
    )
    parser.add_argument("--window", type=float, default=5.0, help="throttle window, s (5)")
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="async agents (openai.AsyncOpenAI in async steps) instead of sync ones",
    )
    parser.add_argument(
        "--millis",
        action="store_true",
        help="the 429s also carry retry-after-ms (exact), not only Retry-After (whole seconds)",
    )
    parser.add_argument(
        "--latency", type=float, default=0.2, help="seconds each ordinary answer takes (0.2)"
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
    parser.add_argument("--dir", default=None, help="where the temporary SQLite files go")
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--provider", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--ready", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.concurrency is None:
        args.concurrency = math.ceil(args.agents / max(1, args.workers))
    if args.worker:
        if not (args.ready and args.provider):
            parser.error("--worker needs --provider URL and --ready PATH")
        return serve(args.worker, args.provider, args.concurrency, args.ready, args.use_async)
    if min(args.agents, args.calls, args.workers, args.concurrency) < 1:
        parser.error("--agents, --calls, --workers and --concurrency must be >= 1")
    if args.window <= 0 or args.latency < 0:
        parser.error("--window must be > 0 and --latency >= 0")

    began = time.perf_counter()
    kinds = list(args.stores)
    pg_version = postgres_version(args.postgres_url) if "postgres" in kinds else None
    if pg_version is None and "postgres" in kinds:
        kinds.remove("postgres")
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"stalwart {stalwart.__version__} throttle: Python {sys.version.split()[0]}, "
        f"SQLite {sqlite3.sqlite_version}"
        + (f", PostgreSQL {pg_version}" if pg_version else "")
        + f"; {os.cpu_count()} CPUs ({platform.machine()}, {platform.system()}), "
        f"load average {load} at start"
    )
    print(
        f"parameters: {args.agents} {'async' if args.use_async else 'sync'} agents x "
        f"{args.calls} model calls, {args.workers} worker "
        f"processes x concurrency {args.concurrency}, answers take {args.latency:g} s, a "
        f"{args.window:g} s throttle window in the middle of the throttled pass"
        + (" (Retry-After and retry-after-ms)" if args.millis else " (Retry-After)"),
        flush=True,
    )

    rows: list[tuple[Pass, Pass]] = []
    with (
        tempfile.TemporaryDirectory(prefix="stalwart-bench-", dir=args.dir) as folder,
        fake_provider() as provider,
    ):
        provider.latency = args.latency
        for kind in kinds:
            sub = Path(folder) / kind
            sub.mkdir()
            stores = Stores(kind, str(sub), args.postgres_url)
            try:
                rows.append(measure(kind, stores, provider, args))
            finally:
                stores.drop()

    print()
    print_rows(rows, args.window)
    print(
        "notes: seconds from just before the first app.start to the last completion; ideal =\n"
        "  baseline s + window; ratio = wall s / ideal; calls/run = HTTP calls at the server\n"
        "  (mean / max), attempts/run = the journal's; in window = calls per run inside the\n"
        "  window (1 = no attempt wasted); resumed = a run's first call after the window - its\n"
        "  end (Retry-After is whole seconds, rounded up, so up to 1 s late by design);\n"
        "  failed att. / server-set = failed attempts / those whose delay the server set;\n"
        "  durable = runs that waited on a durable timer (waits over 5 s)."
    )
    dead = sum(base.dead + hit.dead for base, hit in rows)
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"total {time.perf_counter() - began:.0f} s, load average {load} at the end")
    if dead:
        print(f"FAILED: {dead} dead letters (runs that did not complete)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
