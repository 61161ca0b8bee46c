"""``stalwart migrate``: the whole store copied into an empty one of any backend, in one
transaction of the target, then verified.

The source is only read. The target is written in one transaction, so a copy that fails
leaves it as it was. Every table of ``tables.COPIED`` moves in key order, a page at a time
(never the whole store in memory), inserted in bulk (``COPY`` on PostgreSQL); the journal's
triggers are off meanwhile, since what they compute (``run_spend`` and its kin) is copied as
the source holds it. The extension port's tables move too, created in the target by their
integration's own migrations where the target lacks them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..._errors import StoreError, UsageError, mask_url
from ..base import Store
from .access import Bulk
from .extensions import extension_tables
from .tables import COPIED, Table

__all__ = ["Count", "Report", "check_empty", "copy_store", "live_workers", "verify"]


@dataclass(slots=True)
class Count:
    """One table's rows (or digest) on each side."""

    table: str
    source: int | str
    target: int | str

    @property
    def same(self) -> bool:
        """Whether both sides agree."""
        return self.source == self.target


@dataclass(slots=True)
class Report:
    """What a copy did: rows copied, seconds, and the verification."""

    copied: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    counts: list[Count] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every count and digest agrees."""
        return all(c.same for c in self.counts)


def live_workers(source: Bulk, lease_seconds: float) -> list[str]:
    """The workers of ``source`` seen within the last ``lease_seconds`` (by the store's
    clock)."""
    offset = source.store.clock_offset() or 0.0
    since = time.time() + offset - lease_seconds
    sql = f"SELECT id FROM workers WHERE seen_at >= {source.param('since')} ORDER BY id"
    return [r[0] for r in source.read(lambda c: c.execute(sql, {"since": since}).fetchall())]


def check_empty(target: Bulk) -> None:
    """Refuse a target holding data (``UsageError`` naming the table); what an app writes
    when it opens a store (its queue declarations) does not count."""
    for entry in COPIED:
        if entry.merge or entry.replace:
            continue
        if target.columns(entry.name) and target.count(entry.name):
            raise UsageError(
                f"the target store {mask_url(target.url)} is not empty (its {entry.name} table "
                "has rows); migrate only into a new store: give --to a new SQLite file or an "
                "empty PostgreSQL database or schema"
            )
    for name in extension_tables(target):
        if target.count(name):
            raise UsageError(
                f"the target store {mask_url(target.url)} is not empty ({name} has rows); "
                "migrate only into a new store"
            )


def _shared_columns(source: Bulk, target: Bulk, entry: Table) -> tuple[str, ...]:
    """The columns of ``entry`` both stores have, its key first."""
    name = entry.name
    theirs = set(target.columns(name))
    columns = [c for c in source.columns(name) if c in theirs]
    missing = [k for k in entry.key if k not in columns]
    if missing:
        raise StoreError(f"{name}: the key column {missing[0]} is missing on one side")
    return tuple(entry.key) + tuple(c for c in columns if c not in entry.key)


def _copy_table(
    source: Bulk, target: Bulk, conn: Any, entry: Table, progress: Callable[[str, int], None]
) -> int:
    columns = _shared_columns(source, target, entry)
    done = 0
    if entry.replace:
        conn.execute(f"DELETE FROM {entry.name}")  # a name from tables.COPIED
    for page in source.pages(entry.name, columns, entry.key):
        if entry.merge:
            target.insert_new(conn, entry.name, columns, page, entry.key)
        else:
            target.insert(conn, entry.name, columns, page)
        done += len(page)
        progress(entry.name, done)
    target.renumber(conn, entry.name)
    return done


def copy_store(
    source_store: Store,
    target_store: Store,
    *,
    progress: Callable[[str, int], None] = lambda _t, _n: None,
) -> Report:
    """Copy every row of ``source_store`` into ``target_store`` (checked empty first) and
    verify both sides; see the module docstring."""
    source, target = Bulk(source_store), Bulk(target_store)
    check_empty(target)
    report = Report()
    began = time.monotonic()

    def work(conn: Any) -> None:
        restore = target.without_triggers(conn, "journal")
        for entry in COPIED:
            if source.columns(entry.name) and target.columns(entry.name):
                report.copied[entry.name] = _copy_table(source, target, conn, entry, progress)
        for name in extension_tables(source):
            entry = Table(name, source.primary_key(name))
            report.copied[name] = _copy_table(source, target, conn, entry, progress)
        restore()

    target.write(work)
    oldest = source_store.schema_version().oldest_compatible
    if target_store.schema_version().oldest_compatible < oldest:
        target_store.require_oldest_compatible(oldest)
    report.seconds = time.monotonic() - began
    report.counts = verify(source, target, extension_tables(source))
    return report


def verify(source: Bulk, target: Bulk, extensions: list[str]) -> list[Count]:
    """Row counts of every copied table on both sides, and the digests of the
    content-addressed tables (payloads, snapshot chunks) over their keys and bytes."""
    counts: list[Count] = []
    for entry in COPIED:
        if not source.columns(entry.name):
            continue
        theirs = _merged_count(source, target, entry) if entry.merge else target.count(entry.name)
        counts.append(Count(entry.name, source.count(entry.name), theirs))
    counts.extend(Count(n, source.count(n), target.count(n)) for n in extensions)
    for name, key in (("payloads", "digest"), ("snapshot_chunks", "digest")):
        if source.columns(name):
            counts.append(
                Count(
                    f"{name} digest",
                    source.digest(name, key, "data"),
                    target.digest(name, key, "data"),
                )
            )
    return counts


def _merged_count(source: Bulk, target: Bulk, entry: Table) -> int:
    """How many of the source's rows of a merged table the target holds (the target may
    hold more, its own declarations)."""
    mine = {
        row[: len(entry.key)]
        for page in source.pages(entry.name, entry.key, entry.key)
        for row in page
    }
    theirs = {row for page in target.pages(entry.name, entry.key, entry.key) for row in page}
    return len(mine & theirs)
