"""The store extension port: tables of their own, on the app's store, for integrations.

An integration that keeps data of its own (LangGraph's checkpoints, an agent SDK's session)
declares a namespace and its migrations, then reads and writes its tables through the app's
own connections, with the store's retries::

    from stalwart._extension import ExtensionStore, Migration

    ext = ExtensionStore(app, "langgraph", [
        Migration(1, sqlite="CREATE TABLE ext_langgraph_blobs (...)",
                     postgres="CREATE TABLE ext_langgraph_blobs (...)"),
    ])
    with ext.transaction() as tx:
        tx.execute("INSERT INTO ext_langgraph_blobs ... VALUES (:k, :v)", {"k": k, "v": v})
        row = tx.fetchone("SELECT v FROM ext_langgraph_blobs WHERE k = :k", {"k": k})

- Migrations are numbered 1, 2, 3... per namespace and applied once per store, in one
  transaction under a lock (two apps starting at once apply them once); the store keeps each
  namespace's version in ``stalwart_extensions``. A store whose namespace is newer than the
  code's migrations is refused, as the core refuses a newer schema.
- Every object a migration creates, alters or drops is named ``ext_<namespace>_*``: an
  integration never touches the core's tables, nor another integration's.
- SQL uses ``:name`` placeholders on both dialects (``ext.dialect`` is ``"sqlite"`` or
  ``"postgres"`` for the statements that differ).
- ``transaction()`` is one store transaction held by a ``with`` block: committed on exit,
  rolled back on an exception; begun with the store's waits for a busy SQLite file, but not
  retried once the block has begun. ``run(fn)`` / ``await arun(fn)`` run ``fn(tx)`` in one
  transaction that the store retries whole (SQLite busy, PostgreSQL reconnects, serialization
  failures), so ``fn`` must do nothing but SQL. ``execute`` / ``fetchall`` / ``fetchone`` run
  one statement as its own transaction, retried too: write them so that running one twice
  (after a commit whose acknowledgement was lost) is harmless, e.g. with ``ON CONFLICT``.

docs/extension-port.md is this page for authors of integrations.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlsplit

from ._engine.invocation import CURRENT_RUN, CURRENT_STEP
from ._errors import EncryptionKeyMissing, StoreError, UsageError, mask_url
from ._keyring import key_id_of
from ._store import Store

if TYPE_CHECKING:
    from ._app import Stalwart

__all__ = ["ExtensionStore", "Migration", "Transaction", "current_app"]


def current_app() -> Stalwart | None:
    """The app whose run this code executes in (workflow code or one of its steps), else
    ``None``: what lets an integration object made without ``app=`` use the run's own store."""
    scope = CURRENT_STEP.get()
    inv = scope.invocation if scope is not None else CURRENT_RUN.get()
    if inv is None:
        return None
    app: Stalwart | None = inv.runtime.app()
    return app


T = TypeVar("T")
Dialect = Literal["sqlite", "postgres"]
Params = Mapping[str, Any] | None

_NAMESPACE = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Objects a migration names: created, altered, dropped, indexed or referenced.
_OBJECT = re.compile(
    r"""\b(?:
        CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX|VIEW|TRIGGER|SEQUENCE)
            (?:\s+IF\s+NOT\s+EXISTS)?
      | (?:ALTER|DROP)\s+(?:TABLE|INDEX|VIEW|TRIGGER|SEQUENCE)(?:\s+IF\s+EXISTS)?
      | \bON(?!\s+(?:DELETE|UPDATE|CONFLICT|COMMIT)\b)
      | REFERENCES
      | RENAME\s+TO
    )\s+("?[\w.]+"?)""",
    re.IGNORECASE | re.VERBOSE,
)
_COMMENT = re.compile(r"--[^\n]*")

_VERSIONS_TABLE = """CREATE TABLE IF NOT EXISTS stalwart_extensions (
    namespace TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
)"""
_GET_VERSION = "SELECT version FROM stalwart_extensions WHERE namespace = :namespace"
_SET_VERSION = """INSERT INTO stalwart_extensions (namespace, version) VALUES (:namespace, :version)
ON CONFLICT (namespace) DO UPDATE SET version = excluded.version"""
_PG_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/stalwart-extensions'))"


class Migration(NamedTuple):
    """One version of a namespace's tables: its SQL on each dialect (one or more statements
    separated by ``;``; ``--`` comment lines allowed)."""

    version: int
    sqlite: str
    postgres: str


class Transaction:
    """Statements inside one store transaction (``:name`` placeholders on both dialects)."""

    def __init__(self, conn: Any, translate: Callable[[str], str], keyring: Any = None) -> None:
        self._conn = conn
        self._translate = translate
        self._keyring = keyring  # the app's (encryption at rest), or None

    def seal(self, data: bytes | None) -> bytes | None:
        """``data`` as a column should keep it: encrypted under the app's current key when it
        has a keyring (docs/encryption.md), else as it is. Seal every value that holds what
        users or models said."""
        return data if data is None or self._keyring is None else self._keyring._seal(data)

    def open(self, data: bytes | None) -> bytes | None:
        """What ``seal`` was given (``EncryptionKeyMissing`` without the key it names)."""
        if data is None or bytes(data[:1]) != b"E":
            return None if data is None else bytes(data)
        if self._keyring is None:
            raise EncryptionKeyMissing(key_id_of(bytes(data)) or "?")
        return bytes(self._keyring._open(bytes(data)))

    def _cursor(self, sql: str, params: Params) -> Any:
        return self._conn.execute(self._translate(sql), dict(params or {}))

    def execute(self, sql: str, params: Params = None) -> int:
        """Run one statement; how many rows it changed."""
        return int(self._cursor(sql, params).rowcount)

    def fetchall(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Every row of one query."""
        return [tuple(row) for row in self._cursor(sql, params).fetchall()]

    def fetchone(self, sql: str, params: Params = None) -> tuple[Any, ...] | None:
        """The first row of one query, or ``None``."""
        row = self._cursor(sql, params).fetchone()
        return None if row is None else tuple(row)


def _same(sql: str) -> str:
    return sql


@functools.lru_cache(maxsize=512)
def _pyformat(sql: str) -> str:
    from ._store.postgres import _pyformat as translate

    return translate(sql)


def _dialect_of(url: str) -> Dialect:
    return "postgres" if urlsplit(url).scheme in ("postgresql", "postgres") else "sqlite"


def check_migrations(namespace: str, migrations: Sequence[Migration]) -> None:
    """Refuse a bad namespace, versions other than 1..n, or SQL naming an object outside
    ``ext_<namespace>_*``."""
    if not _NAMESPACE.fullmatch(namespace) or namespace.endswith("_"):
        raise UsageError(
            f"extension namespace {namespace!r}: use lowercase letters, digits and underscores, "
            "starting with a letter (at most 40 characters)"
        )
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise UsageError(
            f"extension {namespace!r}: migration versions must be 1, 2, 3... in order "
            f"(got {versions})"
        )
    prefix = f"ext_{namespace}_"
    for migration in migrations:
        for dialect, sql in (("sqlite", migration.sqlite), ("postgres", migration.postgres)):
            for name in _OBJECT.findall(_COMMENT.sub("", sql)):
                bare = name.strip('"').rsplit(".", 1)[-1].lower()
                if not bare.startswith(prefix):
                    raise UsageError(
                        f"extension {namespace!r}, migration {migration.version} ({dialect}) "
                        f"names {name}: an extension's tables and indexes are named "
                        f"{prefix}*"
                    )


class ExtensionStore:
    """A namespace of tables on an app's store, reached through the app's own connections.

    Constructing it applies the namespace's pending ``migrations`` (see the module docstring)."""

    def __init__(self, app: Stalwart, namespace: str, migrations: Sequence[Migration]) -> None:
        check_migrations(namespace, migrations)
        self.namespace = namespace
        self.url = app.url
        self.dialect: Dialect = _dialect_of(app.url)
        self._store: Any = _store_of(app)
        self._translate = _pyformat if self.dialect == "postgres" else _same
        self._migrate(list(migrations))

    # -- migrations -----------------------------------------------------------------------

    def _migrate(self, migrations: list[Migration]) -> None:
        def work(tx: Transaction) -> None:
            if self.dialect == "postgres":
                tx.execute(_PG_LOCK)
            tx.execute(_VERSIONS_TABLE)
            row = tx.fetchone(_GET_VERSION, {"namespace": self.namespace})
            current = int(row[0]) if row else 0
            if current > len(migrations):
                raise StoreError(
                    f"the store {mask_url(self.url)} has the tables of extension "
                    f"{self.namespace!r} at version {current}, newer than this code's "
                    f"{len(migrations)}; upgrade the integration on this machine"
                )
            for migration in migrations[current:]:
                script = migration.postgres if self.dialect == "postgres" else migration.sqlite
                self._store._apply_script(tx._conn, script)
                tx.execute(
                    _SET_VERSION, {"namespace": self.namespace, "version": migration.version}
                )

        self.run(work)

    def version(self) -> int:
        """The namespace's version in the store (0 before its first migration)."""
        row = self.fetchone(_GET_VERSION, {"namespace": self.namespace})
        return int(row[0]) if row else 0

    # -- transactions ---------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One store transaction for the ``with`` block: committed when it ends, rolled back
        when it raises. Not retried once begun (``run`` is)."""
        errors = _driver_errors(self.dialect)
        try:
            held = _hold_sqlite if self.dialect == "sqlite" else _hold_postgres
            with held(self._store) as conn:
                yield Transaction(conn, self._translate, self._store.keyring)
        except errors as exc:
            raise StoreError(f"{mask_url(self.url)}: {_first_line(exc)}") from exc

    def run(self, fn: Callable[[Transaction], T]) -> T:
        """``fn(tx)`` in one transaction, retried whole while the store is busy or reconnecting
        (so ``fn`` may run more than once: it must only run SQL)."""
        result: T = self._store._write(
            lambda conn: fn(Transaction(conn, self._translate, self._store.keyring))
        )
        return result

    async def arun(self, fn: Callable[[Transaction], T]) -> T:
        """``run(fn)`` in a thread, off the event loop."""
        return await asyncio.to_thread(self.run, fn)

    def _one(self, use: Callable[[Transaction], T]) -> T:
        result: T = self._store._run(
            lambda conn: use(Transaction(conn, self._translate, self._store.keyring))
        )
        return result

    def execute(self, sql: str, params: Params = None) -> int:
        """One statement in its own transaction (retried: make it harmless to run twice)."""
        return self._one(lambda tx: tx.execute(sql, params))

    def fetchall(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Every row of one query."""
        return self._one(lambda tx: tx.fetchall(sql, params))

    def fetchone(self, sql: str, params: Params = None) -> tuple[Any, ...] | None:
        """The first row of one query, or ``None``."""
        return self._one(lambda tx: tx.fetchone(sql, params))


def _store_of(app: Stalwart) -> Store:
    return app._runtime.store


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _driver_errors(dialect: Dialect) -> tuple[type[BaseException], ...]:
    if dialect == "sqlite":
        import sqlite3

        return (sqlite3.Error,)
    import psycopg

    return (psycopg.Error,)


@contextmanager
def _hold_sqlite(store: Any) -> Iterator[Any]:
    """The SQLite store's one connection, in ``BEGIN IMMEDIATE`` for the whole block: its lock
    is held meanwhile, as the store's own write transactions hold it."""
    with store._lock:
        conn = store._conn
        store._retrying(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


@contextmanager
def _hold_postgres(store: Any) -> Iterator[Any]:
    """A connection of the PostgreSQL store's pool, in one transaction for the whole block."""
    with store._connection() as conn, conn.transaction():
        yield conn
