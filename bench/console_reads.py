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
import datetime
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
from pathlib import Path
from typing import Any

from console_seed import (
    DAY,
    SHARED_KEY,
    STATUSES,
    Rows,
    Seeded,
    Shape,
    drop_schema,
    seed_postgres,
    seed_sqlite,
)

import stalwart
from stalwart import testing

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
BUDGET_MS = 200.0
POLL = "GET /runs/ID/journal?after="
PAGE = 100  # the console's run page reads its journal this many entries at a time

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

    def by_name_queue() -> list[int]:
        return [app.count_workflows(s, "support_agent", "batch") for s in statuses]

    def by_since() -> list[int]:
        return [app.count_workflows(s, since=time.time() - DAY) for s in statuses]

    parent = seeded.parent_id
    reads.append(("count_workflows(status, name) x 7", by_name))
    reads.append(("count_workflows(status, queue) x 7", by_queue))
    reads.append(("count_workflows(status, name, queue) x 7", by_name_queue))
    reads.append(("count_workflows(status, since) x 7", by_since))
    reads.append(("run list (page + 7 counts)", run_list))
    reads.append(
        ("list waiting status=suspended", lambda: app._list_waiting("suspended", limit=51))
    )
    reads.append(("list children (parent_id=)", lambda: app.list_workflows(parent_id=parent)))
    reads.append(
        ("count children x 7", lambda: [app.count_workflows(s, parent_id=parent) for s in statuses])
    )
    whole = app.journal(big)
    middle = whole[len(whole) // 2].id
    for label, run in (("10-entry", small), ("1,000-entry", big)):
        reads += [
            (f"describe {label} run", lambda run=run: app.describe(run)),
            (f"journal {label} run", lambda run=run: app.journal(run)),
            (f"journal first page {label}", lambda run=run: app.journal(run, limit=PAGE)),
            (
                f"run page {label} (describe+journal page)",
                lambda run=run: (app.describe(run), app.journal(run, limit=PAGE)),
            ),
        ]
    reads += [
        ("journal middle page 1,000-entry", lambda: app.journal(big, after=middle, limit=PAGE)),
        ("journal_size 1,000-entry", lambda: app.journal_size(big)),
        ("usage 1,000-entry", lambda: app.usage(big)),
        ("approvals() pending", app.approvals),
        ("approvals(pending=False)", lambda: app.approvals(pending=False)),
        ("pending approvals count (the console's nav)", app._pending_approvals),
        ("queues()", app.queues),
        ("workers()", app.workers),
        ("breakers()", app.breakers),
        ("schedules()", app.schedules),
        ("shared_get", lambda: app.shared_get(SHARED_KEY)),
        ("shared_history (300 writes)", lambda: app.shared_history(SHARED_KEY)),
    ]  # fmt: skip
    return reads


@contextlib.contextmanager
def ui_server(url: str) -> Iterator[str]:
    """``stalwart ui`` on a free port until the block ends; its base URL."""
    with ui_process(url) as (base, _pid):
        yield base


@contextlib.contextmanager
def ui_process(url: str, code: Path | None = None) -> Iterator[tuple[str, int]]:
    """``stalwart ui`` on a free port until the block ends, of the package in ``code`` when
    given (else this interpreter's): its base URL and its process id."""
    command = [sys.executable, "-m", "stalwart", "ui", "--url", url, "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k not in ("STALWART_URL", "STALWART_UI_TOKEN")}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    process = subprocess.Popen(
        [*command, "--token", "bench"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=code,  # so the working directory's package is never the one imported
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
        yield line.removeprefix("console: ").strip().rstrip("/"), process.pid
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
    from stalwart._api_answers import encode_cursor

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
        ("GET /runs?status=needs_attention", get("/api/v1/runs", status="needs_attention")),
        ("GET /runs?name=support_agent&queue=batch",
         get("/api/v1/runs", name="support_agent", queue="batch")),
        ("GET /runs?since=(1 day ago)", get("/api/v1/runs", since=iso_ago(DAY))),
        ("GET /runs?limit=1 (the console's nav)", get("/api/v1/runs", limit=1)),
        ("GET /runs?parent_id= (children, 200)",
         get("/api/v1/runs", parent_id=seeded.parent_id, limit=200)),
    ]  # fmt: skip
    children = get("/api/v1/runs", parent_id=seeded.parent_id, limit=200)
    approvals = get("/api/v1/approvals")
    for label, run in (("10-entry", seeded.small_id), ("1,000-entry", seeded.big_id)):
        path = f"/api/v1/runs/{run}/journal"
        one, journal, first = get(f"/api/v1/runs/{run}"), get(path), get(path, limit=PAGE)
        reads += [
            (f"GET /runs/ID {label}", one),
            (f"GET /runs/ID/journal {label}", journal),
            (f"GET /runs/ID/journal?limit={PAGE} {label}", first),
            (  # a suspended run's page reads GET /approvals too
                f"run page {label} (console's 3 GETs)",
                lambda one=one, first=first: (one(), children(), first()),
            ),
        ]
        if run == seeded.big_id:  # the next page on scroll, and the poll after the last entry
            entries = journal()["entries"]
            middle = entries[len(entries) // 2]["id"]
            reads.append((f"GET /runs/ID/journal?after=&limit={PAGE} {label}",
                          get(path, after=middle, limit=PAGE)))  # fmt: skip
            reads.append((f"{POLL} {label}", get(path, after=entries[-1]["id"])))
    reads += [
        ("GET /approvals", approvals),
        ("GET /approvals?all=true", get("/api/v1/approvals", all="true")),
        ("GET /approvals/count (the console's nav)", get("/api/v1/approvals/count")),
        ("GET /queues", get("/api/v1/queues")),
        ("GET /workers", get("/api/v1/workers")),
        ("GET /breakers", get("/api/v1/breakers")),
        ("GET /schedules", get("/api/v1/schedules")),
    ]
    return reads


def iso_ago(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(time.time() - seconds, datetime.UTC).isoformat()


# -- plans --------------------------------------------------------------------------------------


def explained(seeded: Seeded, deep: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, query name, parameters) of each query a read of the console or the API runs."""
    nothing = {"status": None, "name": None, "queue": None, "since": None, "parent_id": None}
    page = {**nothing, "limit": 50, "before": None, "before_id": None}
    at, run = deep.created_at.timestamp(), deep.workflow_id
    one = {"workflow_id": seeded.small_id}
    big = {"workflow_id": seeded.big_id}
    failed = {**nothing, "status": "failed"}
    children = {**page, "parent_id": seeded.parent_id, "limit": 200}
    suspended = {"ids": [seeded.small_id, seeded.big_id]}
    return [
        ("list_runs", "list_runs", page),
        ("list_runs status", "list_runs", {**page, "status": "failed"}),
        ("list_runs status=needs_attention", "list_runs", {**page, "status": "needs_attention"}),
        ("list_runs name", "list_runs", {**page, "name": seeded.rare_name}),
        ("list_runs queue", "list_runs", {**page, "queue": "batch"}),
        ("list_runs since", "list_runs", {**page, "since": time.time() - DAY}),
        ("list_runs deep page", "list_runs", {**page, "before": at, "before_id": run}),
        ("list_runs status+name", "list_runs", {**page, "status": "failed", "name": "x"}),
        ("list_runs name+queue", "list_runs", {**page, "name": "support_agent", "queue": "batch"}),
        ("list_runs parent_id", "list_runs", children),
        ("count_runs", "count_runs", nothing),
        ("count_runs status", "count_runs", {**nothing, "status": "failed"}),
        ("count_runs status+name", "count_runs", {**failed, "name": seeded.rare_name}),
        ("count_runs status+queue", "count_runs", {**failed, "queue": "batch"}),
        ("count_runs status+since", "count_runs", {**failed, "since": time.time() - DAY}),
        ("count_runs status+parent_id", "count_runs", {**failed, "parent_id": seeded.parent_id}),
        ("get_run", "get_run", one),
        ("journal", "journal", one),
        ("journal after (the run page's poll)", "journal_after", {**one, "after": 1}),
        ("journal page (the run page's first)", "journal_page", {**big, "after": 0, "limit": 100}),
        ("journal_size", "journal_size", one),
        ("payloads_below (a journal's payload trees)", "payloads_below",
         {"digests": [bytes(20)], "leaves": []}),
        ("step_usage", "step_usage", one),
        ("get_approval", "get_approval", {**one, "approval_id": "1"}),
        ("approvals_of_runs (a page's waits)", "approvals_of_runs", suspended),
        ("list_approvals pending", "list_approvals", {"pending": 1, "workflow_id": None}),
        ("list_approvals all", "list_approvals", {"pending": None, "workflow_id": None}),
        ("count_pending_approvals (the nav)", "count_pending_approvals", {}),
        ("list_queues", "list_queues", {}),
        ("queue_counts (queues page)", "queue_counts", {}),
        ("run_counts (metrics, the queues page before)", "run_counts", {}),
        ("list_workers", "list_workers", {}),
        ("list_breakers", "list_breakers", {"now": time.time()}),
        ("list_schedules", "list_schedules", {}),
        ("read_shared", "read_shared", {"key": SHARED_KEY}),
        ("shared_history", "shared_history", {"key": SHARED_KEY}),
    ]  # fmt: skip


# A full scan these queries cannot avoid: a count of every run reads that many index entries
# (no counter table keeps them); the metrics' gauges count every run by queue and status; the
# approvals list has no limit (the API pages nothing there), so it reads every request, or
# every pending one, and PostgreSQL reads a table whose rows a query mostly returns whole.
# Shown, not failed.
INHERENT = {"count_runs", "run_counts", "list_approvals"}
# Tables that grow with the runs: a full scan of one fails the bench (the fleet's tables,
# queues, workers, breakers and schedules, are read whole: they hold what operators declared).
GROWING = r"runs|journal|approvals|payloads|shared_writes|events|breaker_failures"
FILTERS = ("status", "name", "queue", "parent_id")


def plan_of(store: Any, kind: str, name: str, params: dict[str, Any]) -> list[str]:
    """The plan of query ``name`` as the store runs it with ``params``."""
    sql = store._sql(name, params) if hasattr(store, "_sql") else store._q[name]
    if kind == "sqlite":
        rows = store._run(lambda conn: conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
        return [str(row[3]) for row in rows]
    rows = store._run(lambda conn: conn.execute("EXPLAIN " + sql, params).fetchall())
    return [str(row[0]) for row in rows]


def unindexed(kind: str, plan: list[str], filters: list[str]) -> list[str]:
    """The steps of ``plan`` that read a growing table without an index, or read all of
    ``runs`` in order (SQLite) or filter it without any index of a filter given (PostgreSQL)
    when the query filters on ``filters``."""
    bad = []
    for step in plan:
        if kind == "sqlite":
            scan = re.match(rf"\s*SCAN ({GROWING})\b", step)
            if scan and "USING INDEX" not in step and "USING COVERING INDEX" not in step:
                bad.append(step.strip())
            elif scan and filters and scan[1] == "runs":
                bad.append(f"{step.strip()} (filters without the filter's index)")
        elif re.search(rf"Seq Scan on ({GROWING})\b", step):
            bad.append(step.strip())
    if kind == "postgres" and filters:
        conds = " ".join(step for step in plan if "Index Cond:" in step)
        for step in plan:
            named = [f for f in filters if re.search(rf"Filter: .*\b{f} = ", step)]
            if named and not any(re.search(rf"\b{f} = ", conds) for f in filters):
                bad.append(f"{step.strip()} (filters without the filter's index)")
    return bad


def check_plans(app: Any, kind: str, seeded: Seeded, deep: Any) -> list[str]:
    store = testing.store_of(app)
    failures = []
    how = "EXPLAIN QUERY PLAN" if kind == "sqlite" else "EXPLAIN"
    print(f"\n{kind}: query plans (as run; {how})")
    for label, name, given in explained(seeded, deep):
        if name not in store._q:
            print(f"  {label}: not in this code's queries")
            continue
        params = {k: store._list(v) if isinstance(v, list) else v for k, v in given.items()}
        plan = plan_of(store, kind, name, params)
        filters = [k for k in FILTERS if params.get(k) is not None]
        bad = unindexed(kind, plan, filters)
        inherent = name in INHERENT and not filters
        print(f"  {label}{' (a full count: inherent)' if inherent and bad else ''}:")
        for step in plan:
            print(f"      {step}")
        failures += [] if inherent else [f"{kind} {label}: {step}" for step in bad]
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
