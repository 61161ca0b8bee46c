"""Rows in bulk, on either dialect: a table's columns and count, its rows page by page in key
order, and batched inserts (``COPY`` on PostgreSQL, ``executemany`` on SQLite). What
``migrate``, ``export`` and ``import`` stand on; the only SQL of this package."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ..._errors import StoreError, mask_url
from ..base import Store
from ..sql._base import SQLBase

__all__ = ["PAGE", "Bulk", "quoted"]

T = TypeVar("T")
PAGE = 5000  # rows a read fetches, and an insert sends, at a time


def quoted(name: str) -> str:
    """A column or table name as both dialects read it whatever it is (``"offset"``)."""
    return '"' + name.replace('"', '""') + '"'


def _fetch_all(sql: str, params: dict[str, Any]) -> Callable[[Any], list[Any]]:
    return lambda conn: list(conn.execute(sql, params).fetchall())


class Bulk:
    """Bulk access to one open SQL store (``memory://``, SQLite or PostgreSQL)."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, SQLBase):
            raise StoreError(f"{mask_url(store.url)}: not a SQL store")
        self.store = store
        self.url = store.url
        self.dialect = "postgres" if store.url.split(":", 1)[0].startswith("postgres") else "sqlite"
        self._columns: dict[str, tuple[str, ...]] = {}

    # -- transactions ----------------------------------------------------------------------

    def write(self, work: Callable[[Any], T]) -> T:
        """``work(conn)`` in one write transaction of the store."""
        return self.store._write(work)

    def read(self, work: Callable[[Any], T]) -> T:
        """``work(conn)`` outside a transaction."""
        return self.store._run(work)

    def param(self, name: str) -> str:
        """A named placeholder."""
        return f"%({name})s" if self.dialect == "postgres" else f":{name}"

    # -- schema ----------------------------------------------------------------------------

    def tables(self) -> list[str]:
        """Every table of the store's schema."""
        if self.dialect == "postgres":
            sql = (
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        else:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        return sorted(row[0] for row in self.read(lambda c: c.execute(sql).fetchall()))

    def columns(self, table: str) -> tuple[str, ...]:
        """``table``'s columns in their order (``()`` when there is no such table)."""
        if table not in self._columns:
            if self.dialect == "postgres":
                sql = (
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                    "current_schema() AND table_name = %(t)s ORDER BY ordinal_position"
                )
                rows = self.read(lambda c: c.execute(sql, {"t": table}).fetchall())
            else:
                pragma = f"PRAGMA table_info({quoted(table)})"
                rows = [(r[1],) for r in self.read(lambda c: c.execute(pragma).fetchall())]
            self._columns[table] = tuple(r[0] for r in rows)
        return self._columns[table]

    def primary_key(self, table: str) -> tuple[str, ...]:
        """``table``'s primary key columns, in order (``()`` without one)."""
        if self.dialect == "postgres":
            sql = (
                "SELECT k.column_name FROM information_schema.table_constraints t "
                "JOIN information_schema.key_column_usage k ON k.constraint_name = "
                "t.constraint_name AND k.table_schema = t.table_schema AND k.table_name = "
                "t.table_name WHERE t.table_schema = current_schema() AND t.table_name = %(t)s "
                "AND t.constraint_type = 'PRIMARY KEY' ORDER BY k.ordinal_position"
            )
            return tuple(r[0] for r in self.read(lambda c: c.execute(sql, {"t": table}).fetchall()))
        pragma = f"PRAGMA table_info({quoted(table)})"
        rows = self.read(lambda c: c.execute(pragma).fetchall())
        return tuple(r[1] for r in sorted((r for r in rows if r[5]), key=lambda r: r[5]))

    def count(self, table: str) -> int:
        """How many rows ``table`` holds."""
        row = self.read(lambda c: c.execute(f"SELECT count(*) FROM {quoted(table)}").fetchone())
        return int(row[0])

    # -- reading ---------------------------------------------------------------------------

    def pages(
        self,
        table: str,
        columns: Sequence[str],
        key: Sequence[str],
        where: str = "",
        params: dict[str, Any] | None = None,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """``table``'s rows (``columns``, which start with ``key``) in key order, a page at a
        time (keyset paging: each page is one statement, so nothing is held between pages).
        A table without a key is read in one statement."""
        cols = ", ".join(quoted(c) for c in columns)
        base = f"SELECT {cols} FROM {quoted(table)}"
        if not key:
            sql = base + (f" WHERE {where}" if where else "")
            rows: list[tuple[Any, ...]] = self.read(_fetch_all(sql, params or {}))
            for start in range(0, len(rows), PAGE):
                yield rows[start : start + PAGE]
            return
        keys = ", ".join(quoted(k) for k in key)
        order = f" ORDER BY {keys} LIMIT {PAGE}"
        after = f"({keys}) > ({', '.join(self.param(f'k{i}') for i in range(len(key)))})"
        last: tuple[Any, ...] | None = None
        while True:
            clauses = [w for w in (where, after if last is not None else "") if w]
            sql = base + (" WHERE " + " AND ".join(clauses) if clauses else "") + order
            bound = dict(params or {})
            if last is not None:
                bound.update({f"k{i}": v for i, v in enumerate(last[: len(key)])})
            page: list[tuple[Any, ...]] = self.read(_fetch_all(sql, bound))
            if not page:
                return
            yield page  # both drivers give tuples, bytes for blobs
            if len(page) < PAGE:
                return
            last = page[-1]

    def digest(self, table: str, key: str, data: str) -> str:
        """SHA-256 over ``table``'s rows in ``key`` order (key and data bytes): the same on
        both dialects for the same rows."""
        total = hashlib.sha256()
        for page in self.pages(table, (key, data), (key,)):
            for k, v in page:
                total.update(bytes(k))
                total.update(hashlib.sha256(bytes(v)).digest())
        return total.hexdigest()

    # -- writing ---------------------------------------------------------------------------

    def insert(
        self, conn: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Insert ``rows`` inside the caller's transaction (``COPY`` on PostgreSQL)."""
        if not rows:
            return
        cols = ", ".join(quoted(c) for c in columns)
        if self.dialect == "postgres":
            with conn.cursor().copy(f"COPY {quoted(table)} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        marks = ", ".join("?" for _ in columns)
        conn.executemany(f"INSERT INTO {quoted(table)} ({cols}) VALUES ({marks})", rows)

    def insert_new(
        self,
        conn: Any,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        conflict: Sequence[str],
    ) -> int:
        """Insert ``rows`` inside the caller's transaction, skipping a row whose ``conflict``
        columns match a stored one; how many were inserted."""
        if not rows:
            return 0
        cols = ", ".join(quoted(c) for c in columns)
        marks = ", ".join(self.param(f"c{i}") for i in range(len(columns)))
        on = ", ".join(quoted(c) for c in conflict)
        sql = f"INSERT INTO {quoted(table)} ({cols}) VALUES ({marks}) ON CONFLICT ({on}) DO NOTHING"
        done = 0
        for row in rows:
            done += conn.execute(sql, {f"c{i}": v for i, v in enumerate(row)}).rowcount
        return done

    def insert_numbered(
        self, conn: Any, table: str, columns: Sequence[str], row: Sequence[Any], identity: str
    ) -> int:
        """Insert one row without its ``identity`` column, which the database numbers; the
        number it got."""
        cols = ", ".join(quoted(c) for c in columns)
        marks = ", ".join(self.param(f"c{i}") for i in range(len(columns)))
        sql = f"INSERT INTO {quoted(table)} ({cols}) VALUES ({marks}) RETURNING {quoted(identity)}"
        found = conn.execute(sql, {f"c{i}": v for i, v in enumerate(row)}).fetchone()
        return int(found[0])

    def renumber(self, conn: Any, table: str) -> None:
        """After rows were copied with their numbers: the next number the database gives is
        past the highest (PostgreSQL's identity and serial columns; SQLite takes the highest
        rowid, and its AUTOINCREMENT counter follows inserted ids, by itself)."""
        if self.dialect != "postgres":
            return
        numbered = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = %(t)s AND (is_identity = 'YES' "
            "OR column_default LIKE 'nextval%%')",
            {"t": table},
        ).fetchall()
        for (column,) in numbered:
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence(%(t)s, %(c)s), "
                f"(SELECT coalesce(max({quoted(column)}), 0) + 1 FROM {quoted(table)}), false)",
                {"t": quoted(table), "c": column},
            )

    def without_triggers(self, conn: Any, table: str) -> Callable[[], None]:
        """Inside the caller's transaction: ``table``'s triggers off (what they compute is
        copied as the source holds it); returns what turns them back on, in the same
        transaction, so no other transaction ever sees them off."""
        if self.dialect == "postgres":
            conn.execute(f"ALTER TABLE {quoted(table)} DISABLE TRIGGER USER")
            return lambda: conn.execute(f"ALTER TABLE {quoted(table)} ENABLE TRIGGER USER")
        found = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
            (table,),
        ).fetchall()
        for name, _sql in found:
            conn.execute(f"DROP TRIGGER {quoted(name)}")

        def restore() -> None:
            for _name, sql in found:
                conn.execute(sql)

        return restore
