"""The shared context over SQL: each write of a key is a history row unique on (key, version),
made by compare-and-set in one transaction serialized per key (PostgreSQL: an advisory lock on
the key; SQLite: writers are serial), with the expected version in the insert's ``WHERE``."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from ..base import Entry, SharedRow, SharedSet
from ._base import CALL_ID, SQLBase

__all__ = ["SharedVerbs"]


class SharedVerbs(SQLBase):
    """The ``SharedStore`` verbs over SQL."""

    def _resolved(self, rows: list[SharedRow]) -> list[SharedRow]:
        return [dataclasses.replace(row, value=self.load_payload(bytes(row.value))) for row in rows]

    def read_shared(self, key: str) -> SharedRow | None:
        """The latest write of ``key``, its value resolved; ``None``: never written."""
        rows = self._resolved(self._records("read_shared", {"key": key}, SharedRow))
        return rows[0] if rows else None

    def shared_history(self, key: str) -> list[SharedRow]:
        """Every write of ``key``, oldest first, values resolved."""
        return self._resolved(self._records("shared_history", {"key": key}, SharedRow))

    def write_shared(
        self,
        key: str,
        value: bytes,
        *,
        if_version: int | None,
        by: str,
        now: float,
        workflow_id: str | None = None,
        owner: str | None = None,
        entry: Entry | None = None,
        encode_result: Callable[[int | None], bytes] | None = None,
    ) -> SharedSet:
        """Write ``key``'s next version if its version is still ``if_version`` (when given),
        and with ``entry`` journal the outcome for ``workflow_id`` in the same transaction
        while ``owner`` holds its lease. A retry of a commit whose acknowledgement was lost
        finds the write (or the entry) it made and returns what it decided."""
        footprint = entry if workflow_id is not None else None  # journaled: the entry it makes
        call_id = uuid.uuid4().hex  # the id of a plain write (a journaled one has its entry's)

        def landed(conn: Any) -> bool:
            found = conn.execute(self._q["shared_write_of_call"], {"key": key, "call_id": call_id})
            return found.fetchone() is not None

        def work(conn: Any) -> SharedSet:
            if footprint is not None:
                assert workflow_id is not None
                self._lock_run(conn, workflow_id)
                held = {"workflow_id": workflow_id, "owner": owner}
                if conn.execute(self._q["lease_held"], held).fetchone() is None:
                    return SharedSet(held=False, version=None)
            conn.execute(self._q["lock_shared"], {"key": key})
            current = int(conn.execute(self._q["shared_version"], {"key": key}).fetchone()[0])
            version: int | None = None
            if if_version is None or if_version == current:
                params = {
                    "key": key,
                    "expected": current,
                    "value": self._stash(conn, value),
                    "by": by,
                    "now": now,
                    "call_id": call_id if footprint is None else CALL_ID.get(),
                }
                if conn.execute(self._q["insert_shared"], params).rowcount == 1:
                    version = current + 1
            if footprint is not None:
                assert workflow_id is not None
                written = footprint
                if encode_result is not None:
                    written = dataclasses.replace(footprint, output=encode_result(version))
                self._journal_in(conn, workflow_id, written)
            return SharedSet(held=True, version=version)

        return self._once(workflow_id, footprint, work, landed=landed)
