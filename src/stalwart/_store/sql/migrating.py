"""A SQL store's schema: checking it and applying the migrations it lacks, in the transaction
that opens the store (expand-then-contract, so the previous release keeps working)."""

from __future__ import annotations

from typing import Any

from ..._errors import StoreError, mask_url
from ..base import READ_ONLY_DECLARATIONS, SCHEMA_VERSION, UnmigratedStore
from ..queries import load_migrations

__all__ = ["Migrating"]


class Migrating:
    """The migration half of a SQL store's plumbing (``SQLBase`` stands on it)."""

    url: str
    durable: bool
    _q: dict[str, str]

    def _apply_script(self, conn: Any, sql: str) -> None:
        """Execute one migration file's statements inside the migration transaction."""
        raise NotImplementedError

    def _migrate_in(self, conn: Any, backend: str) -> None:
        """Inside a write transaction: check the store's schema and apply what is missing.

        Migrations are expand-then-contract: a migration that only adds leaves the store usable
        by the previous release; one that removes or changes what older code reads declares the
        oldest code it still serves (``-- oldest-compatible: N``), and the store records it.
        """
        if READ_ONLY_DECLARATIONS.get() and self.durable:
            self._refuse_unmigrated(conn)
        conn.execute(self._q["schema_table"])
        row = conn.execute(self._q["schema_version"]).fetchone()
        current, oldest = (int(row[0]), int(row[1])) if row else (0, 0)
        if oldest > SCHEMA_VERSION:
            raise StoreError(
                f"the store {mask_url(self.url)} has schema version {current}, which needs "
                f"stalwart code of schema version {oldest} or newer (this code has "
                f"{SCHEMA_VERSION}); upgrade stalwart on this machine"
            )
        for migration in load_migrations(backend):
            if migration.version > current:
                self._apply_script(conn, migration.sql)
                oldest = max(oldest, migration.oldest_compatible)
                conn.execute(
                    self._q["set_schema_version"],
                    {"version": migration.version, "oldest_compatible": oldest},
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
            f"the store {mask_url(self.url)} {found} and this code needs {SCHEMA_VERSION}; "
            "stalwart check reads a store without migrating it: check against a copy of "
            "the store, or once a worker of this release has migrated it"
        )
