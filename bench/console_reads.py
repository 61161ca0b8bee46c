"""The console's reads on a big store: 100,000 runs and 1,000,000 journal entries (seeded by
bench/console_seed.py, which says what they are).

On each store, every read is called ``--calls`` times after three warm-up calls through the
public Python API and, with ``stalwart ui`` started as a subprocess, over HTTP with httpx:
median and p95 (nearest rank) in ms against the issue's budget of 200 ms, judged on p95, and
the ratio to a baseline measured in the same run, the store's primary-key read of one run row.
Over HTTP, the run page's poll of the 1,000-entry run (``?after=`` its last entry's id) is
printed against the whole journal it replaces.
Last, each read query's plan as the store runs it (its optional filters resolved; SQLite
``EXPLAIN QUERY PLAN``, PostgreSQL ``EXPLAIN`` of the statement with its values, as psycopg's
client-side binding sends it): the bench exits 1 if a query of the run list or of a run page
reads ``runs`` or ``journal`` without an index, or (SQLite) scans all of ``runs`` when it
filters on status, name or queue. Timings never fail it.

    python bench/console_reads.py [--stores sqlite,postgres] [--calls 30] [--no-http]
                                  [--reseed] [--runs N --entries N] [--postgres-url URL]

PostgreSQL needs a reachable server (``--postgres-url``, default $STALWART_TEST_POSTGRES_URL or
postgresql://postgres@127.0.0.1:5432/test); without one its rows are skipped with a note.
Seeding takes about a minute per store (the SQLite file is then cached); the whole bench about
five minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from console_seed import DAY, STATUSES, Rows, Seeded, Shape, drop_schema, seed_postgres, seed_sqlite

import stalwart
from stalwart import testing

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
BUDGET_MS = 200.0
POLL = "GET /runs/ID/journal?after="

# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Timing:
    query: str
    median: float
    p95: float


def timed(query: str, call: Callable[[], Any], calls: int) -> Timing:
    """``call`` run three times to warm up, then ``calls`` times, in ms."""
    for _ in range(3):
        call()
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    ordered = sorted(samples)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return Timing(query, statistics.median(samples), p95)


def deep_run(app: Any, offset: int) -> Any:
    """The run ``offset`` rows down the unfiltered list, as the WorkflowInfo a page ends at."""
    sql = "SELECT workflow_id FROM runs ORDER BY created_at DESC, workflow_id DESC LIMIT 1 OFFSET "
    (found,) = testing.execute_sql(testing.store_of(app), sql + str(offset))
    return app.describe(found[0]).info


def python_reads(
    app: Any, seeded: Seeded, deep: Any, down: str
) -> list[tuple[str, Callable[[], Any]]]:
    store = testing.store_of(app)
    small, big = seeded.small_id, seeded.big_id
    statuses = list(STATUSES)
    reads: list[tuple[str, Callable[[], Any]]] = [
        ("baseline: pk read of one run row", lambda: store.get_run(small)),
        ("list first page (limit 50)", lambda: app.list_workflows(limit=50)),
        ("list status=failed", lambda: app.list_workflows("failed", limit=50)),
        ("list status=needs_attention", lambda: app.list_workflows("needs_attention", limit=50)),
        ("list name=support_agent", lambda: app.list_workflows(name="support_agent", limit=50)),
        (f"list name={seeded.rare_name}", lambda: app.list_workflows(name=seeded.rare_name)),
        ("list queue=batch", lambda: app.list_workflows(queue="batch", limit=50)),
        ("list since=1 day ago", lambda: app.list_workflows(limit=50, since=time.time() - DAY)),
        (f"list deep page (before= run {down})", lambda: app.list_workflows(limit=50, before=deep)),
        ("count_workflows() all runs", app.count_workflows),
        ("count_workflows(status) x 7", lambda: [app.count_workflows(s) for s in statuses]),
    ]

    def by_name() -> list[int]:
        return [app.count_workflows(s, "support_agent") for s in statuses]

    def run_list() -> Any:  # what GET /api/v1/runs reads, but for the waits of its runs
        return app.list_workflows(limit=51), [app.count_workflows(s) for s in statuses]

    def by_queue() -> list[int]:
        return [app.count_workflows(s, queue="batch") for s in statuses]

    reads.append(("count_workflows(status, name) x 7", by_name))
    reads.append(("count_workflows(status, queue) x 7", by_queue))
    reads.append(("run list (page + 7 counts)", run_list))
    for label, run in (("10-entry", small), ("1,000-entry", big)):
        reads += [
            (f"describe {label} run", lambda run=run: app.describe(run)),
            (f"journal {label} run", lambda run=run: app.journal(run)),
            (
                f"run page {label} (describe+journal)",
                lambda run=run: (app.describe(run), app.journal(run)),
            ),
        ]
    reads.append(("approvals() pending", app.approvals))
    return reads


@contextlib.contextmanager
def ui_server(url: str) -> Iterator[str]:
    """``stalwart ui`` on a free port until the block ends; its base URL."""
    command = [sys.executable, "-m", "stalwart", "ui", "--url", url, "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k not in ("STALWART_URL", "STALWART_UI_TOKEN")}
    process = subprocess.Popen(
        [*command, "--token", "bench"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x) for x in process.stdout or ()], daemon=True
    ).start()
    seen = []
    try:
        while not (line := lines.get(timeout=60)).startswith("console: "):
            seen.append(line)
            if process.poll() is not None:
                raise RuntimeError(f"stalwart ui exited: {''.join(seen)}")
        yield line.removeprefix("console: ").strip().rstrip("/")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def http_reads(
    client: Any, seeded: Seeded, deep: Any, down: str
) -> list[tuple[str, Callable[[], Any]]]:
    from stalwart._ui.api import encode_cursor

    def get(path: str, **params: Any) -> Callable[[], Any]:
        def call() -> Any:
            answer = client.get(path, params=params)
            answer.raise_for_status()
            return answer.json()

        return call

    reads = [
        ("GET /health (HTTP round trip)", get("/api/v1/health")),
        ("GET /runs (limit 50, counts)", get("/api/v1/runs")),
        ("GET /runs?status=failed", get("/api/v1/runs", status="failed")),
        ("GET /runs?status=suspended", get("/api/v1/runs", status="suspended")),
        ("GET /runs?status=pending", get("/api/v1/runs", status="pending")),
        (f"GET /runs?name={seeded.rare_name}", get("/api/v1/runs", name=seeded.rare_name)),
        ("GET /runs?name=support_agent", get("/api/v1/runs", name="support_agent")),
        ("GET /runs?queue=batch", get("/api/v1/runs", queue="batch")),
        (f"GET /runs?before=(run {down})", get("/api/v1/runs", before=encode_cursor(deep))),
    ]
    for label, run in (("10-entry", seeded.small_id), ("1,000-entry", seeded.big_id)):
        one, journal = get(f"/api/v1/runs/{run}"), get(f"/api/v1/runs/{run}/journal")
        reads += [
            (f"GET /runs/ID {label}", one),
            (f"GET /runs/ID/journal {label}", journal),
            (f"run page {label} (both GETs)", lambda one=one, journal=journal: (one(), journal())),
        ]
        if run == seeded.big_id:  # the run page's poll: only what came after the last entry
            last = journal()["entries"][-1]["id"]
            poll = get(f"/api/v1/runs/{run}/journal", after=last)
            reads.append((f"{POLL} {label}", poll))
    reads.append(("GET /approvals", get("/api/v1/approvals")))
    return reads


# -- plans --------------------------------------------------------------------------------------


def explained(seeded: Seeded, deep: Any) -> list[tuple[str, str, dict[str, Any], bool]]:
    """(label, query name, parameters, on the run list or a run page) of each read query."""
    nothing = {"status": None, "name": None, "queue": None, "since": None, "parent_id": None}
    page = {**nothing, "limit": 50, "before": None, "before_id": None}
    at, run = deep.created_at.timestamp(), deep.workflow_id
    one = {"workflow_id": seeded.small_id}
    failed = {**nothing, "status": "failed"}
    return [
        ("list_runs", "list_runs", page, True),
        ("list_runs status", "list_runs", {**page, "status": "failed"}, True),
        ("list_runs name", "list_runs", {**page, "name": seeded.rare_name}, True),
        ("list_runs queue", "list_runs", {**page, "queue": "batch"}, True),
        ("list_runs since", "list_runs", {**page, "since": time.time() - DAY}, True),
        ("list_runs deep page", "list_runs", {**page, "before": at, "before_id": run}, True),
        ("list_runs status+name", "list_runs", {**page, "status": "failed", "name": "x"}, True),
        ("count_runs", "count_runs", nothing, True),
        ("count_runs status", "count_runs", {**nothing, "status": "failed"}, True),
        ("count_runs status+name", "count_runs", {**failed, "name": seeded.rare_name}, True),
        ("count_runs status+queue", "count_runs", {**failed, "queue": "batch"}, True),
        ("get_run", "get_run", one, True),
        ("journal", "journal", one, True),
        ("journal after (the run page's poll)", "journal_after", {**one, "after": 1}, True),
        ("journal_size", "journal_size", one, True),
        ("step_usage", "step_usage", one, True),
        ("get_approval", "get_approval", {**one, "approval_id": "1"}, True),
        ("list_approvals pending", "list_approvals", {"pending": 1, "workflow_id": None}, False),
        ("list_queues", "list_queues", {}, False),
        ("run_counts (queues page)", "run_counts", {}, False),
    ]  # fmt: skip


def plan_of(store: Any, kind: str, name: str, params: dict[str, Any]) -> list[str]:
    """The plan of query ``name`` as the store runs it with ``params``."""
    sql = store._sql(name, params) if hasattr(store, "_sql") else store._q[name]
    if kind == "sqlite":
        rows = store._run(lambda conn: conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
        return [str(row[3]) for row in rows]
    rows = store._run(lambda conn: conn.execute("EXPLAIN " + sql, params).fetchall())
    return [str(row[0]) for row in rows]


def unindexed(kind: str, plan: list[str], filtered: bool) -> list[str]:
    """The steps of ``plan`` that read ``runs`` or ``journal`` without an index, or read all of
    ``runs`` in order when the query filters on an indexed column."""
    bad = []
    for step in plan:
        if kind == "sqlite":
            scan = re.match(r"\s*SCAN (runs|journal)\b", step)
            if scan and "USING INDEX" not in step and "USING COVERING INDEX" not in step:
                bad.append(step.strip())
            elif scan and filtered and scan[1] == "runs":
                bad.append(f"{step.strip()} (filters without the filter's index)")
        elif re.search(r"Seq Scan on (runs|journal)\b", step):
            bad.append(step.strip())
    return bad


def check_plans(app: Any, kind: str, seeded: Seeded, deep: Any) -> list[str]:
    store = testing.store_of(app)
    failures = []
    how = "EXPLAIN QUERY PLAN" if kind == "sqlite" else "EXPLAIN"
    print(f"\n{kind}: query plans (as run; {how})")
    for label, name, params, console in explained(seeded, deep):
        if name not in store._q:
            print(f"  {label}: not in this code's queries")
            continue
        plan = plan_of(store, kind, name, params)
        filtered = any(params.get(k) is not None for k in ("status", "name", "queue"))
        bad = unindexed(kind, plan, filtered) if console else []
        print(f"  {label}{'' if console else ' (not on the run list or a run page)'}:")
        for step in plan:
            print(f"      {step}")
        failures += [f"{kind} {label}: {step}" for step in bad]
    return failures


# -- the report ---------------------------------------------------------------------------------


def table(kind: str, timings: list[Timing], baseline: float) -> None:
    print(f"\n{'store':<9} {'query':<40} {'median ms':>10} {'p95 ms':>9} {'x base':>8}  budget")
    for t in timings:
        verdict = "MET" if t.p95 < BUDGET_MS else "NOT MET"
        ratio = t.median / baseline if baseline else float("nan")
        print(f"{kind:<9} {t.query:<40} {t.median:>10.2f} {t.p95:>9.2f} {ratio:>8.0f}  {verdict}")


def polls(kind: str, timings: list[Timing]) -> None:
    """The run page's poll of the 1,000-entry run against the whole journal it replaced."""
    by = {t.query: t for t in timings}
    full, poll = by["GET /runs/ID/journal 1,000-entry"], by[f"{POLL} 1,000-entry"]
    print(
        f"{kind:<9} run page poll, 1,000-entry run: whole journal {full.median:.2f} ms "
        f"(p95 {full.p95:.2f}), after= the last id {poll.median:.2f} ms (p95 {poll.p95:.2f}): "
        f"{full.median / poll.median:.0f}x less per poll"
    )


def measure(kind: str, url: str, seeded: Seeded, args: argparse.Namespace) -> list[str]:
    with stalwart.Stalwart(url) as app:
        offset = min(50_000, app.count_workflows() // 2)
        deep, down = deep_run(app, offset), f"{offset:,}"
        reads = python_reads(app, seeded, deep, down)
        timings = [timed(query, call, args.calls) for query, call in reads]
        baseline = timings[0].median
        print(f"\n{kind}: through the Python API, {args.calls} calls each after 3 warm-up calls")
        table(kind, timings, baseline)
        if not args.no_http:
            import httpx

            with ui_server(url) as base, httpx.Client(base_url=base, timeout=60) as client:
                reads = http_reads(client, seeded, deep, down)
                over_http = [timed(query, call, args.calls) for query, call in reads]
            print(f"\n{kind}: over HTTP (stalwart ui in a subprocess, httpx, one connection)")
            table(kind, over_http, baseline)
            polls(kind, over_http)
        return check_plans(app, kind, seeded, deep)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--no-http", action="store_true", help="only the Python API")
    parser.add_argument("--reseed", action="store_true", help="seed the cached SQLite file again")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
    )
    parser.add_argument("--runs", type=int, default=Shape.runs)
    parser.add_argument("--entries", type=int, default=Shape.entries)
    args = parser.parse_args()
    shape = Shape(runs=args.runs, entries=args.entries)
    made: list[Rows] = []

    def make(codec: Any) -> Rows:
        if not made:
            began = time.perf_counter()
            made.append(Rows(shape, codec, time.time()))
            made[0].seeded = made[0].generate()
            print(f"generated {len(made[0].runs):,} runs, {len(made[0].journal):,} journal "
                  f"entries, {len(made[0].payloads):,} payload pieces, {len(made[0].approvals):,} "
                  f"approvals in {time.perf_counter() - began:.0f} s")  # fmt: skip
        return made[0]

    failures: list[str] = []
    stores = args.stores.split(",")
    if "sqlite" in stores:
        url, seeded = seed_sqlite(shape, make, args.reseed)
        failures += measure("sqlite", url, seeded, args)
    if "postgres" in stores:
        try:
            import psycopg

            psycopg.connect(args.postgres_url, connect_timeout=3).close()
        except Exception as exc:
            print(f"note: PostgreSQL at {args.postgres_url} is not usable ({exc}): skipped")
        else:
            url, schema, seeded = seed_postgres(args.postgres_url, make)
            try:
                failures += measure("postgres", url, seeded, args)
            finally:
                drop_schema(args.postgres_url, schema)
    for failure in failures:
        print(f"UNINDEXED {failure}")
    print("\nplans: every run-list and run-page query uses an index" if not failures else "")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
