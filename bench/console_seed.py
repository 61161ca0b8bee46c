"""The big store bench/console_reads.py reads: 100,000 runs and 1,000,000 journal entries,
written straight into the store's own tables.

Seeding writes runs, journal, payloads, approvals and queues with ``executemany`` in big
transactions, rows shaped as the engine writes them: payloads encoded by the app's codec and
stashed as the store stashes them (up to 256 bytes inline, larger ones by digest, step inputs
over 4 KB as content-addressed trees, so a journal read resolves them as it does in
production); journal ids interleaved across runs in time order, as concurrent runs leave them.
Runs: mixed statuses (mostly completed; failed, cancelled, suspended on an approval, an event
or a timer, pending, running, needing attention), a dozen workflow names of very different
frequency, four queues, created over six weeks (pending and running ones in the last hour), 2%
sharing their creation time with the run before. Ten runs have 1,000 entries each; the others
about ten. One run is the parent of 200 children. Beside the runs, what the fleet pages read:
eight live workers, three breakers with failures, twenty schedules, and a shared key written
300 times. The SQLite store is a file cached under ``bench/.cache`` (reseeded on request or
when the seed's shape changes); PostgreSQL gets a fresh schema ``bench_console_<random>``,
VACUUM ANALYZEd as autovacuum would leave it, for the caller to drop.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import stalwart
from stalwart import testing
from stalwart._model import ErrorRecord, Usage
from stalwart._store.payloads import pack

CACHE = Path(__file__).resolve().parent / ".cache"
SEED_FORMAT = 3  # bump when the seeded rows change shape: the cached file is reseeded
DAY = 86400.0
WEEKS = 6
BATCH = 20_000
CHILDREN = 200
SHARED_KEY = "kb/index"

NAMES = {  # workflow name: share of runs
    "support_agent": 0.34,
    "research_agent": 0.18,
    "triage": 0.14,
    "summarize_ticket": 0.10,
    "code_review": 0.08,
    "deploy_agent": 0.06,
    "invoice_extract": 0.04,
    "email_reply": 0.03,
    "data_cleanup": 0.015,
    "sales_outreach": 0.01,
    "kb_refresh": 0.004,
    "nightly_audit": 0.001,
}
QUEUES = {"default": 0.6, "llm": 0.25, "batch": 0.1, "priority": 0.05}
STATUSES = {
    "completed": 0.80,
    "failed": 0.07,
    "cancelled": 0.03,
    "suspended": 0.04,
    "pending": 0.03,
    "running": 0.02,
    "needs_attention": 0.01,
}
STEPS = {"call_llm": 0.4, "search_docs": 0.2, "run_tool": 0.3, "fetch_url": 0.1}
RUN_COLUMNS = (
    "workflow_id, name, status, queue, priority, input, output, error, created_at, updated_at, "
    "lease_owner, lease_expires_at, wake_at, waiting_for, current_step, parent_id"
)
JOURNAL_COLUMNS = (
    "workflow_id, seq, position, kind, name, status, attempt, started_at, finished_at, input, "
    "output, error, by, compensable, call_id, usage"
)
APPROVAL_COLUMNS = (
    "workflow_id, approval_id, subject, details, requested_at, expires_at, decided_at, "
    "approved, by, reason"
)


@dataclass
class Shape:
    """What to seed; its fields name the cached SQLite file."""

    runs: int = 100_000
    entries: int = 1_000_000
    big_runs: int = 10
    big_entries: int = 1_000
    seed: int = 13
    format: int = SEED_FORMAT

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self)).encode()).hexdigest()[:12]


@dataclass
class Seeded:
    """What the measurements need to know about a seeded store."""

    small_id: str  # a completed run with 10 entries
    big_id: str  # a completed run with 1,000
    rare_name: str
    parent_id: str  # a completed run with CHILDREN child runs
    entries: int
    payloads: int
    approvals: int


# -- generating rows ----------------------------------------------------------------------------


class Rows:
    """The rows of every table, generated from one seeded random source."""

    seeded: Seeded

    def __init__(self, shape: Shape, codec: Any, now: float) -> None:
        self.rng = random.Random(shape.seed)
        self.shape, self.codec, self.now = shape, codec, now
        self.payloads: dict[bytes, bytes] = {}
        words = ["".join(self.rng.choices("etaoinshrdlucmfwypvbgk", k=n)) for n in range(2, 10)]
        self.vocabulary = [w + str(i) for i in range(60) for w in words]
        system = self.text(3000)  # every prompt starts with the same system prompt
        self.prompts = [self.stash([system, self.text(self.rng.randint(200, 5000))], True)]
        self.prompts += [
            self.stash([system, self.text(self.rng.randint(200, 5000))], True) for _ in range(1499)
        ]
        self.replies = [self.stash({"text": self.text(self.rng.randint(150, 2500))}, False)]
        self.replies += [
            self.stash({"text": self.text(self.rng.randint(150, 2500))}, False) for _ in range(1499)
        ]
        self.docs = [self.stash([self.text(400) for _ in range(5)], False) for _ in range(800)]
        self.pages = [
            self.stash(self.text(self.rng.randint(5000, 12000)), False) for _ in range(300)
        ]
        self.asks = [  # a tool's arguments and result: small, inline
            self.stash({"args": [self.text(self.rng.randint(20, 120))], "kwargs": {}}, True)
            for _ in range(20_000)
        ]
        self.results = [
            self.stash({"ok": True, "rows": self.rng.randint(0, 99), "id": i}, False)
            for i in range(20_000)
        ]
        self.runs: list[tuple[Any, ...]] = []
        self.journal: list[tuple[Any, ...]] = []
        self.approvals: list[tuple[Any, ...]] = []
        self.fleet_rows: list[tuple[str, str, list[tuple[Any, ...]]]] = []

    def text(self, size: int) -> str:
        out, length = [], 0
        while length < size:
            word = self.rng.choice(self.vocabulary)
            out.append(word)
            length += len(word) + 1
        return " ".join(out)[:size]

    def stash(self, value: Any, tree: bool) -> bytes | None:
        """``value`` encoded and kept as the store keeps it (its pieces to ``payloads``)."""

        def put(digest: bytes, data: bytes) -> bool:
            new = digest not in self.payloads
            self.payloads[digest] = data
            return new

        return pack(self.codec.encode(value), put, tree=tree)

    def pick(self, weights: dict[str, float]) -> str:
        return self.rng.choices(list(weights), list(weights.values()))[0]

    def generate(self) -> Seeded:
        shape, rng = self.shape, self.rng
        plans = []  # (status, created_at, steps)
        for _ in range(shape.runs):
            status = self.pick(STATUSES)
            recent = status in ("pending", "running")
            age = rng.uniform(0, 3600) if recent else rng.uniform(0, WEEKS * 7 * DAY)
            plans.append([status, self.now - age, 0 if status == "pending" else rng.randint(3, 13)])
        plans.sort(key=lambda plan: plan[1])
        for i in range(1, len(plans)):
            if rng.random() < 0.02:
                plans[i][1] = plans[i - 1][1]  # created in the same microsecond as the one before
        completed = [
            i for i, p in enumerate(plans) if p[0] == "completed" and p[1] < self.now - DAY
        ]
        big = set(rng.sample(completed, shape.big_runs))
        for i in big:
            plans[i][1] -= 3 * DAY
            plans[i][2] = shape.big_entries - 3  # started, resumed, finished
        small = next(i for i in completed if i not in big)
        plans[small][2] = 7
        self._fit(plans, big | {small})
        ids = [f"{rng.getrandbits(128):032x}" for _ in plans]
        names = [self.pick(NAMES) for _ in plans]
        parent = next(i for i in reversed(completed) if i not in big and i != small)
        later = [i for i in range(parent + 1, len(plans)) if i not in big and i != small]
        parents = dict.fromkeys(rng.sample(later, CHILDREN), ids[parent])
        for i, (status, created, steps) in enumerate(plans):
            self._run(ids[i], names[i], status, round(created, 6), steps, parent=parents.get(i))
        self.journal.sort(key=lambda row: row[7])  # ids in time order, runs interleaved
        self.fleet_rows = self.fleet()
        return Seeded(
            small_id=ids[small],
            big_id=ids[min(big)],
            rare_name="nightly_audit",
            parent_id=ids[parent],
            entries=len(self.journal),
            payloads=len(self.payloads),
            approvals=len(self.approvals),
        )

    def _fit(self, plans: list[list[Any]], fixed: set[int]) -> None:
        """Step counts such that the runs have ``entries`` journal entries in all (a step's
        retry counts as one more entry; retries add about 4%)."""
        overhead = {"pending": 1, "running": 2, "suspended": 4, "failed": 4.04, "cancelled": 4}
        total = sum(p[2] * 1.04 + overhead.get(p[0], 3) for p in plans)
        spare = [i for i, p in enumerate(plans) if p[0] == "completed" and i not in fixed]
        while abs(total - self.shape.entries) > 2:
            i = self.rng.choice(spare)
            step = 1 if total < self.shape.entries else -1
            if plans[i][2] + step >= 2:
                plans[i][2] += step
                total += step * 1.04

    def _entry(self, run: str, t: float, kind: str, name: str, status: str, **more: Any) -> None:
        row = {"seq": None, "position": None, "attempt": None, "input": None, "output": None}
        row.update({"error": None, "by": None, "finished_at": t, "usage": None, **more})
        call_id = f"{self.rng.getrandbits(128):032x}"
        self.journal.append(
            (run, row["seq"], row["position"], kind, name, status, row["attempt"], t,
             row["finished_at"], row["input"], row["output"], row["error"], row["by"], 0,
             call_id, row["usage"])
        )  # fmt: skip

    def _step(self, run: str, seq: int, t: float, status: str = "completed") -> float:
        rng, name = self.rng, self.pick(STEPS)
        attempts = 2 if rng.random() < 0.04 else 1
        for attempt in range(1, attempts + 1):
            took = rng.uniform(0.5, 8.0) if name == "call_llm" else rng.uniform(0.01, 1.5)
            last = attempt == attempts
            outcome = status if last else "failed"
            if name == "call_llm":
                given, out = rng.choice(self.prompts), rng.choice(self.replies)
                spent = Usage(rng.randint(800, 9000), rng.randint(50, 900), rng.uniform(0, 0.05))
                usage = spent.to_json(model="gpt-4.1-mini")
            else:
                given = rng.choice(self.asks)
                found = {"search_docs": self.docs, "fetch_url": self.pages}
                out = rng.choice(found.get(name, self.results))
                usage = None
            failed = outcome in ("failed", "in_doubt")
            why = ErrorRecord("RateLimitError", "429 Too Many Requests", final=last or None)
            self._entry(
                run, t, "step", name, outcome, seq=seq, position=str(seq - 1), attempt=attempt,
                finished_at=None if outcome == "in_doubt" else t + took, input=given,
                output=None if failed else out, error=why.to_json() if failed else None,
                usage=usage,
            )  # fmt: skip
            t += took + (rng.uniform(1, 30) if not last else 0)
        return t

    def _run(
        self, run: str, name: str, status: str, created: float, steps: int, *, parent: str | None
    ) -> None:
        rng = self.rng
        given = self.stash({"args": [self.text(rng.randint(40, 400))], "kwargs": {}}, False)
        self._entry(run, created, "run", "started", "completed", input=given)
        t = created + rng.uniform(0.001, 2.0)
        if status != "pending":
            self._entry(run, t, "run", "resumed", "completed")
        gap = 240.0 if steps > 100 else 0.0  # a long conversation runs for days
        for seq in range(1, steps + 1):
            last = seq == steps
            t = self._step(
                run, seq, t, "in_doubt" if last and status == "needs_attention" else "completed"
            )
            t += rng.uniform(0, gap)
        seq = steps + 1
        output = error = waiting = current = owner = None
        wake = lease = None
        if status == "completed":
            output = self.stash({"answer": self.text(rng.randint(50, 600))}, True)
            self._entry(run, t, "run", "finished", "completed", output=output)
        elif status == "failed":
            t = self._step(run, seq, t, "failed")
            error = ErrorRecord("RateLimitError", "429 Too Many Requests").to_json()
            self._entry(run, t, "run", "finished", "failed", error=error)
        elif status == "cancelled":
            reason = self.codec.encode({"reason": "customer withdrew the request"})
            self._entry(run, t, "operator", "cancel", "completed", by="alice", input=reason)
            error = ErrorRecord("Cancelled", "cancelled by alice").to_json()
            self._entry(run, t + 1, "run", "finished", "failed", error=error)
        elif status == "needs_attention":
            why = "step 'call_llm' may have run: resolve it with its result or rerun it"
            error = ErrorRecord("InDoubt", why, seq=steps, reason=why).to_json()
            self._entry(run, t, "run", "needs_attention", "failed", error=error)
        elif status == "running":
            owner, lease = f"worker-{rng.randint(1, 8)}/{rng.randint(100, 999)}/1/ab", self.now + 30
            step = {"name": "call_llm", "seq": seq, "attempt": 1, "started_at": t}
            current = json.dumps(step)
        elif status == "suspended":
            waiting, wake = self._suspend(run, name, seq, t)
        if name == "deploy_agent" and status == "completed" and rng.random() < 0.5:
            self._approval(run, t - 60, decided=t - 5)
        queue = self.pick(QUEUES)
        self.runs.append(
            (run, name, status, queue, 0, given, output, error, created, t, owner, lease, wake,
             waiting, current, parent)
        )  # fmt: skip

    def _suspend(self, run: str, name: str, seq: int, t: float) -> tuple[str | None, float | None]:
        kind = self.rng.choice(["approval", "event", "sleep"])
        if kind == "approval":
            ask = self.codec.encode({"approval_id": "1", "until": None})
            self._entry(run, t, "approval", "deploy", "scheduled", seq=seq, position=str(seq - 1),
                        input=ask, finished_at=None)  # fmt: skip
            self._approval(run, t, decided=None)
            waiting, wake = "approval:1", None
        elif kind == "event":
            ask = self.codec.encode({"name": "customer_reply", "until": None})
            self._entry(run, t, "event", "customer_reply", "scheduled", seq=seq,
                        position=str(seq - 1), input=ask, finished_at=None)  # fmt: skip
            waiting, wake = "event:customer_reply", None
        else:
            wake = t + self.rng.uniform(3600, 7 * DAY)
            ask = self.codec.encode({"until": wake})
            self._entry(run, t, "sleep", "sleep", "scheduled", seq=seq, position=str(seq - 1),
                        input=ask, finished_at=None)  # fmt: skip
            waiting = None
        note = self.codec.encode({"waiting_for": waiting, "until": wake})
        self._entry(run, t, "run", "suspended", "completed", output=note)
        return waiting, wake

    def _approval(self, run: str, at: float, decided: float | None) -> None:
        details = self.codec.encode({"env": "prod", "change": self.text(80)})
        decision = (None, None, None) if decided is None else (1, "alice", "looks right")
        self.approvals.append((run, "1", "deploy", details, at, None, decided, *decision))

    def fleet(self) -> list[tuple[str, str, list[tuple[Any, ...]]]]:
        """(table, columns, rows) of what the fleet pages read besides runs: live workers (seen
        a day ahead, so no read drops them as stale while the bench runs), breakers and their
        failures, schedules, and a shared key's history."""
        now, rng = self.now, self.rng
        workers = [
            (f"worker-{i}/{100 + i}/1/ab", f"host-{i % 3}", 100 + i, json.dumps(["default", "llm"]),
             now - 3600, now + DAY, rng.randint(0, 40), json.dumps(sorted(NAMES)))
            for i in range(8)
        ]  # fmt: skip
        breakers = [
            ("openai", "open", 60.0, now - 10, now + 20, None, None, now - 10),
            ("search", "closed", 60.0, None, None, None, None, 0.0),
            ("crm", "half_open", 60.0, now - 100, now - 40, "probe-1", now + 5, now - 40),
        ]
        failures = [(b[0], now - rng.uniform(0, 50)) for b in breakers for _ in range(5)]
        given = self.codec.encode({"args": [], "kwargs": {}})
        schedules = [
            (f"nightly-{i}", "nightly_audit", f"{i} 3 * * *", "UTC", "latest", given,
             now - DAY / 2, now + DAY / 2, 1, now - 7 * DAY)
            for i in range(20)
        ]  # fmt: skip
        shared = [
            (SHARED_KEY, v, self.stash({"version": v, "text": self.text(200)}, False), "alice",
             now - (300 - v) * 60, None)
            for v in range(1, 301)
        ]  # fmt: skip
        return [
            ("workers", "id, host, pid, queues, started_at, seen_at, running, workflows", workers),
            ("breakers", "name, state, window_seconds, opened_at, retry_at, probe_owner, "
             "probe_until, updated_at", breakers),
            ("breaker_failures", "name, at", failures),
            ("schedules", "name, workflow, cron, timezone, catch_up, input, last_tick, next_due, "
             "revision, declared_at", schedules),
            ("shared_writes", "key, version, value, by, at, call_id", shared),
        ]  # fmt: skip


# -- writing rows -------------------------------------------------------------------------------


def write_rows(conn: Any, mark: str, rows: Rows, begin: Callable[[], Any]) -> None:
    """Every table's rows with ``executemany``, ``BATCH`` rows a transaction."""
    now = rows.now
    queues = [("llm", 8, None, 1.0, now), ("batch", None, 10, 60.0, now)]
    tables = [
        ("queues", "name, concurrency, rate, period, declared_at", queues),
        ("payloads", "digest, data", list(rows.payloads.items())),
        ("runs", RUN_COLUMNS, rows.runs),
        ("journal", JOURNAL_COLUMNS, rows.journal),
        ("approvals", APPROVAL_COLUMNS, rows.approvals),
        *rows.fleet_rows,
    ]
    for table, columns, values in tables:
        marks = ", ".join([mark] * (columns.count(",") + 1))
        sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
        for start in range(0, len(values), BATCH * 5):
            with begin():
                conn.cursor().executemany(sql, values[start : start + BATCH * 5])


@contextlib.contextmanager
def sqlite_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN")
    yield
    conn.execute("COMMIT")


def codec_of(url: str) -> Any:
    """The codec an app on ``url`` encodes payloads with (creating the store's schema)."""
    with stalwart.Stalwart(url) as app:
        return testing.runtime_of(app).codec


def seed_sqlite(shape: Shape, make: Callable[[Any], Rows], reseed: bool) -> tuple[str, Seeded]:
    """The cached SQLite store of ``shape``, seeded first if it is not there."""
    path = CACHE / f"console-{shape.key()}.db"
    notes = path.with_suffix(".json")
    if path.exists() and notes.exists() and not reseed:
        print(f"sqlite: the seeded store cached at {path.relative_to(CACHE.parent.parent)}")
        return f"sqlite:///{path}", Seeded(**json.loads(notes.read_text()))
    CACHE.mkdir(exist_ok=True)
    fresh = path.with_suffix(".seeding")
    for old in CACHE.glob(f"{fresh.name}*"):
        old.unlink()
    began = time.perf_counter()
    rows = make(codec_of(f"sqlite:///{fresh}"))
    seeded = rows.seeded
    conn = sqlite3.connect(fresh, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    write_rows(conn, "?", rows, lambda: sqlite_transaction(conn))
    conn.close()
    fresh.rename(path)
    notes.write_text(json.dumps(asdict(seeded)))
    print(f"sqlite: seeded in {time.perf_counter() - began:.0f} s, {size(path)}")
    return f"sqlite:///{path}", seeded


def seed_postgres(base: str, make: Callable[[Any], Rows]) -> tuple[str, str, Seeded]:
    """A fresh schema of ``base``, seeded; its URL and its name (drop it afterwards)."""
    import psycopg

    schema = f"bench_console_{uuid.uuid4().hex[:10]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    began = time.perf_counter()
    rows = make(codec_of(url))
    with psycopg.connect(base, options=f"-c search_path={schema}", autocommit=True) as conn:
        write_rows(conn, "%s", rows, conn.transaction)
        # run_spend is written by the journal's triggers: analyzed too, as autovacuum would
        # (unanalyzed, the planner takes its 100,000 rows for 700,000 and joins it badly)
        for table in ("runs", "journal", "payloads", "approvals", "run_spend"):
            conn.execute(f"VACUUM ANALYZE {table}")
        found = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        print(f"postgres: seeded in {time.perf_counter() - began:.0f} s ({found.fetchone()[0]})")
    return url, schema, rows.seeded


def drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def size(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:,.0f} MB"
