"""A SQL store's schema: checking it and applying the migrations it lacks when the store is
opened, each in a transaction of its own with the row that records it (expand-then-contract,
so the previous release keeps working; ``_store.versions`` says how the versions are kept)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._errors import StoreError, mask_url
from ..base import READ_ONLY_DECLARATIONS, SCHEMA_VERSION, UnmigratedStore
from ..queries import Migration, load_migrations
from ..versions import SchemaVersion

__all__ = ["Migrating"]

# A backend's write transaction: ``work(conn)`` in one transaction, retried while busy.
Write = Callable[[Callable[[Any], bool]], bool]


class Migrating:
    """The migration half of a SQL store's plumbing (``SQLBase`` stands on it)."""

    url: str
    durable: bool
    _q: dict[str, str]

    def _named(self) -> str:
        """The store as a message names it: its URL, any password masked (SQLite: by its
        absolute path, so the message says which file wherever it is read)."""
        return mask_url(self.url)

    def _apply_script(self, conn: Any, sql: str) -> None:
        """Execute one migration file's statements inside the migration transaction."""
        raise NotImplementedError

    def _lock_schema(self, conn: Any) -> None:
        """Inside a write transaction: serialize the writers of ``stalwart_schema`` (a no-op
        where writers are serial)."""

    def _migrate_with(self, write: Write, backend: str) -> None:
        """Check the store's schema and apply the migrations it lacks, one transaction each
        (a new store is created in one).

        A step's SQL and the row that records its version commit together, so a store is
        always at one version: a process that stops (or a migration that fails) midway leaves
        the steps before it done, and the next open goes on from there. Each transaction
        reads the version again under the schema lock, so processes opening one store at
        once apply each step once. Migrations are expand-then-contract: a migration that only
        adds leaves the store usable by the previous release; one that removes or changes what
        older code reads declares the oldest code it still serves (``-- oldest-compatible:
        N``), and the store records it.
        """
        migrations = load_migrations(backend)
        while write(lambda conn: self._migrate_step(conn, migrations)):
            pass

    def _migrate_step(self, conn: Any, migrations: list[Migration]) -> bool:
        """Inside a write transaction: refuse a store this code cannot use, else apply the
        first migration it lacks (every one, to a new store); whether any is left."""
        if READ_ONLY_DECLARATIONS.get() and self.durable:
            self._refuse_unmigrated(conn)
        self._lock_schema(conn)
        conn.execute(self._q["schema_table"])
        found = self._schema_in(conn)
        if found.oldest_compatible > SCHEMA_VERSION:
            raise StoreError(self._too_new(found))
        missing = [m for m in migrations if m.version > found.version]
        oldest = found.oldest_compatible
        # A new store (no version yet: nothing in it to keep working) is created whole.
        applied = missing if found.version == 0 else missing[:1]
        for step in applied:
            self._apply_script(conn, step.sql)
            oldest = max(oldest, step.oldest_compatible)
            params = {"version": step.version, "oldest_compatible": oldest}
            conn.execute(self._q["set_schema_version"], params)
        return len(missing) > len(applied)

    def _schema_in(self, conn: Any) -> SchemaVersion:
        """The store's latest ``stalwart_schema`` row (version 0 where there is none)."""
        row = conn.execute(self._q["schema_version"]).fetchone()
        return SchemaVersion(int(row[0]), int(row[1])) if row else SchemaVersion(0, 0)

    def _too_new(self, found: SchemaVersion) -> str:
        return (
            f"the store {self._named()} has schema version {found.version}, which needs "
            f"stalwart code of schema version {found.oldest_compatible} or newer, and this "
            f"code's schema version is {SCHEMA_VERSION}: upgrade stalwart on this machine "
            "(to the release that upgraded the store, or a newer one)"
        )

    def _refuse_unmigrated(self, conn: Any) -> None:
        """Read-only (``stalwart check``): a store older than this code is refused, and
        nothing is created to find out (not even the schema table)."""
        try:
            row = conn.execute(self._q["schema_version"]).fetchone()
        except Exception:  # no schema table: no stalwart store here
            row = None
        current = int(row[0]) if row else 0
        if current < SCHEMA_VERSION:
            raise UnmigratedStore(self._unmigrated(current), url=self.url, current=current)

    def _unmigrated(self, current: int) -> str:
        found = f"has schema version {current}" if current else "has no stalwart schema"
        return (
            f"the store {self._named()} {found} and this code needs {SCHEMA_VERSION}; "
            "stalwart check reads a store without migrating it: check against a copy of "
            "the store, or once a worker of this release has migrated it"
        )
