"""What the journal of a conversation agent costs, against the conversation itself.

The agent of the issue: each turn appends a user message (about 320 bytes), then one LLM step
receives the whole conversation so far and its reply (about 300 bytes) is appended, so every
step's input is the conversation, and it stays in the journal for the audit trail. Each size
runs on a fresh store that already holds a one-turn run (so each table and index has its first
pages: a cost of the store, not of the run), on SQLite and on PostgreSQL. Stored bytes are every
value the store keeps for the run: the payloads table (whole payloads, pieces and tree nodes)
and the payload columns of the journal and the run; page slack aside. The keys column adds the
digests the payloads table is keyed by, which the ratio leaves out. On disk is what the run
added to the database: on SQLite the file's size after ``PRAGMA wal_checkpoint(TRUNCATE)`` and
``VACUUM``, less the same for the store before the run, so every row, key, index entry and
page's slack counts.

The main table is varied text: words drawn at random from a vocabulary of 2,000 made-up words
(a seeded generator, so every run of the bench writes the same bytes), which compress about
as badly as prose does. Targets there: at most 1.5x the conversation stored and 2.0x on disk
at 100 turns, and 200 turns cost at most 2.05x what 100 do. The issue's first messages
repeated one sentence, which flatters compression; that table follows, for comparison.

    python bench/journal_growth.py [--turns 50 100 200 400] [--stores sqlite,postgres]
                                   [--postgres-url URL]

PostgreSQL needs a reachable server (``--postgres-url``, default $STALWART_TEST_POSTGRES_URL or
postgresql://postgres@127.0.0.1:5432/test); without one its tables are skipped with a note. On
PostgreSQL, stored bytes are the same query's (values before TOAST compression), and on disk is
every relation of the store's schema (tables, indexes, TOAST) after ``VACUUM FULL``, less the
same for the store before the run.

It is a benchmark, not a test: it exits 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import stalwart

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
TARGET_RATIO = 1.5  # stored, at 100 turns
TARGET_DISK = 2.0  # on disk, at 100 turns
TARGET_GROWTH = 2.05  # 200 turns against 100
STORED_BYTES = """
SELECT (SELECT coalesce(sum(length(data)), 0) FROM payloads)
     + (SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM journal)
     + (SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM runs)
"""
KEY_BYTES = "SELECT coalesce(sum(length(digest)), 0) FROM payloads"

Text = Callable[[str, int], str]


def repetitive(kind: str, turn: int) -> str:
    """The issue's messages: one phrase repeated."""
    if kind == "user":
        return f"question {turn}: " + "why? " * 60
    return f"reply {turn}: " + "the assistant considers the question carefully. " * 6


def varied(seed: int = 1) -> Text:
    """Messages of the same sizes in words drawn from a vocabulary, different every time."""
    rnd = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocabulary = ["".join(rnd.choices(letters, k=rnd.randint(2, 9))) for _ in range(2000)]

    def text(kind: str, turn: int) -> str:
        words, size = [], 300 if kind == "user" else 290
        while sum(len(w) + 1 for w in words) < size:
            words.append(rnd.choice(vocabulary))
        return f"{'question' if kind == 'user' else 'reply'} {turn}: " + " ".join(words)

    return text


class Measured(NamedTuple):
    """One agent's figures."""

    conversation: int
    stored: int
    keys: int
    disk: int
    seconds: float


def warmed(url: str) -> str:
    """``url`` once the store is migrated and holds a one-turn run: what a run adds is then
    its own rows, not the first page of each table and index (on PostgreSQL, an index of an
    empty table is one page and gets two with its first row: a cost of the store, not of the
    journal)."""
    converse(url, 1, repetitive, "warm-up")
    return url


class SQLiteStores:
    """Fresh SQLite stores in a folder; on disk is the file's size once its WAL is
    checkpointed and it is vacuumed."""

    label = "SQLite"

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.count = 0
        base = self.fresh()
        self.base_stored, self.base_keys = (
            self.query(base, STORED_BYTES),
            self.query(base, KEY_BYTES),
        )
        self.base_disk = self.disk(base)

    def fresh(self) -> str:
        self.count += 1
        return warmed(f"sqlite:///{Path(self.folder) / f'store-{self.count}.db'}")

    def query(self, url: str, sql: str) -> int:
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return int(conn.execute(sql).fetchone()[0])
        finally:
            conn.close()

    def disk(self, url: str) -> int:
        path = Path(url.removeprefix("sqlite:///"))
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return path.stat().st_size

    def close(self) -> None:
        """Nothing to drop: the folder goes with its files."""


class PostgresStores:
    """Fresh PostgreSQL stores, a schema each; on disk is every relation of the schema
    (tables, their indexes and TOAST) once ``VACUUM FULL`` has rewritten them."""

    label = "PostgreSQL"

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self.conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
        self.schemas: list[str] = []
        base = self.fresh()
        self.base_stored, self.base_keys = (
            self.query(base, STORED_BYTES),
            self.query(base, KEY_BYTES),
        )
        self.base_disk = self.disk(base)

    def fresh(self) -> str:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        self.schemas.append(schema)
        return warmed(f"{self.url}{'&' if '?' in self.url else '?'}schema={schema}")

    def _schema(self, url: str) -> str:
        return url.rsplit("schema=", 1)[1]

    def query(self, url: str, sql: str) -> int:
        self.conn.execute(f"SET search_path TO {self._schema(url)}")
        row = self.conn.execute(sql).fetchone()
        return int(row[0]) if row else 0

    def disk(self, url: str) -> int:
        schema = self._schema(url)
        tables = self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            self.conn.execute(f"VACUUM FULL {schema}.{table}")
        size = self.conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
        return int(size[0] or 0) if size else 0

    def close(self) -> None:
        """Drop every schema handed out."""
        for schema in self.schemas:
            self.conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        self.conn.close()


Stores = SQLiteStores | PostgresStores


def converse(url: str, turns: int, text: Text, workflow_id: str) -> tuple[int, float]:
    """Run the agent for ``turns`` on the store at ``url``: the conversation's bytes and the
    seconds it took."""
    with stalwart.Stalwart(url) as app:

        @app.step(name="llm")
        def llm(conversation: list[dict[str, str]]) -> str:
            return text("assistant", len(conversation))

        @app.workflow(name="agent")
        def agent(turns: int) -> list[dict[str, str]]:
            conversation: list[dict[str, str]] = []
            for i in range(turns):
                conversation.append({"role": "user", "content": text("user", i)})
                conversation.append({"role": "assistant", "content": llm(conversation)})
            return conversation

        start = time.perf_counter()
        final = app.run(agent, turns, workflow_id=workflow_id)
        elapsed = time.perf_counter() - start
    return len(json.dumps(final).encode()), elapsed


def run_agent(stores: Stores, turns: int, text: Text) -> Measured:
    """What one agent of ``turns`` added to a fresh store that holds a short run."""
    url = stores.fresh()
    conversation, elapsed = converse(url, turns, text, f"chat-{turns}")
    stored = stores.query(url, STORED_BYTES) - stores.base_stored
    keys = stores.query(url, KEY_BYTES) - stores.base_keys
    disk = stores.disk(url) - stores.base_disk
    return Measured(conversation, stored, keys, disk, elapsed)


def table(
    title: str, sizes: list[int], text: Callable[[], Text], stores: Stores
) -> dict[int, Measured]:
    """Print one table; the figures per size."""
    print(f"{title}, {stores.label}")
    print(
        f"{'turns':>6}{'conversation':>14}{'stored':>11}{'ratio':>8}{'with keys':>11}"
        f"{'on disk':>11}{'ratio':>8}{'ms/step':>9}"
    )
    by_size = {}
    for turns in sizes:
        m = run_agent(stores, turns, text())
        by_size[turns] = m
        print(
            f"{turns:>6}{m.conversation:>14,}{m.stored:>11,}{m.stored / m.conversation:>7.2f}x"
            f"{(m.stored + m.keys) / m.conversation:>10.2f}x{m.disk:>11,}"
            f"{m.disk / m.conversation:>7.2f}x{m.seconds * 1e3 / turns:>9.2f}",
            flush=True,
        )
    if 100 in by_size and 200 in by_size:
        growth = by_size[200].stored / by_size[100].stored
        disk_growth = by_size[200].disk / by_size[100].disk
        print(f"growth 200/100 turns: {growth:.2f}x stored, {disk_growth:.2f}x on disk")
    print()
    return by_size


def verdict(by_size: dict[int, Measured], label: str) -> None:
    """Print whether the targets are met on one store."""
    if 100 not in by_size or 200 not in by_size:
        return
    at100, at200 = by_size[100], by_size[200]
    ratio, disk = at100.stored / at100.conversation, at100.disk / at100.conversation
    growth = max(at200.stored / at100.stored, at200.disk / at100.disk)
    met = ratio <= TARGET_RATIO and disk <= TARGET_DISK and growth <= TARGET_GROWTH
    print(
        f"target on {label} (varied text): at most {TARGET_RATIO}x stored and {TARGET_DISK}x on "
        f"disk at 100 turns, {TARGET_GROWTH}x from 100 to 200 turns: "
        f"{'MET' if met else 'NOT MET'} ({ratio:.2f}x, {disk:.2f}x, {growth:.2f}x)"
    )


def open_stores(kind: str, folder: str, postgres_url: str) -> Stores | None:
    """Fresh stores of ``kind``, or ``None`` (with a note) when its server can't be reached."""
    if kind == "sqlite":
        return SQLiteStores(folder)
    try:
        return PostgresStores(postgres_url)
    except Exception as exc:  # no psycopg, no server: the SQLite figures stand alone
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"note: PostgreSQL at {postgres_url} is unreachable ({detail}): skipped\n")
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--turns", type=int, nargs="+", default=[50, 100, 200, 400], help="agent sizes"
    )
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    args = parser.parse_args(argv)
    if any(t < 1 for t in args.turns):
        parser.error("--turns must be >= 1")
    sizes = sorted(set(args.turns))
    print(
        f"stalwart {stalwart.__version__} journal growth: an agent whose every LLM step receives "
        f"the whole conversation, SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    )
    print()
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-") as folder:
        for kind in args.stores.split(","):
            stores = open_stores(kind, folder, args.postgres_url)
            if stores is None:
                continue
            try:
                main_table = table("a conversation agent on varied text", sizes, varied, stores)
                table("the same agent on the issue's repetitive text", sizes, _issue, stores)
            finally:
                stores.close()
            verdict(main_table, stores.label)
            print()
    return 0


def _issue() -> Text:
    return repetitive


if __name__ == "__main__":
    sys.exit(main())
