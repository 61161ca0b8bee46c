"""Workspace snapshots over SQL (see ``stalwart._store.snapshots``): each verb one short
transaction; a chunk's use is recorded in the transaction that finds it stored."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..snapshots import ChunkWrite, SnapshotFileRow, SnapshotRow, StoredChunk
from ._base import SQLBase, _typed

__all__ = ["SnapshotVerbs"]


class _Missing(Exception):
    """Rolls back a ``put_chunks`` that named chunks not stored without their data."""

    def __init__(self, digests: list[bytes]) -> None:
        super().__init__(len(digests))
        self.digests = digests


class SnapshotVerbs(SQLBase):
    """The ``SnapshotStore`` verbs over SQL."""

    # -- what a backend may refine ----------------------------------------------------

    def _bound(self, conn: Any, query: str, params: dict[str, Any]) -> Any:
        """Execute ``query`` with its parameters bound apart from its text (big ``bytes``
        sent and read as they are, where the dialect would otherwise inline them as text)."""
        return conn.execute(query, params)

    def _bound_many(self, conn: Any, query: str, rows: Sequence[dict[str, Any]]) -> None:
        """Execute ``query`` once per row of parameters, in as few round trips as the driver
        allows."""
        conn.executemany(query, rows)

    def bulk_writes(self) -> AbstractContextManager[None]:
        """Big writes follow one another (a snapshot's chunks): let the backend pace them
        (SQLite: its write-ahead log is copied meanwhile, see ``checkpoints``)."""
        return nullcontext()

    def _wrote_in_bulk(self, size: int, held: float) -> None:
        """``size`` bytes were committed inside ``bulk_writes`` by a transaction of ``held``
        seconds."""

    # -- the verbs ---------------------------------------------------------------------

    def begin_snapshot(self, snapshot_id: str, *, workflow_id: str, name: str, now: float) -> bool:
        """Insert an incomplete snapshot of an existing run."""
        params = {"id": snapshot_id, "workflow_id": workflow_id, "name": name, "now": now}

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            return bool(conn.execute(self._q["begin_snapshot"], params).rowcount == 1)

        return self._write(work)

    def put_chunks(
        self, snapshot_id: str, chunks: Sequence[StoredChunk], *, now: float
    ) -> ChunkWrite:
        """Store the new chunks and record every use, or nothing if one assumed stored is not."""

        ordered = sorted(chunks, key=lambda chunk: chunk.digest)

        def work(conn: Any) -> int:
            added = 0
            missing = []
            for chunk in ordered:  # one order for every writer: no deadlock between two
                key = {"digest": chunk.digest}
                if chunk.data is None:
                    if conn.execute(self._q["chunk_held"], key).fetchone() is None:
                        missing.append(chunk.digest)
                else:
                    params = {**key, "data": chunk.data, "size": chunk.size, "now": now}
                    stored = self._bound(conn, self._q["put_chunk"], params).rowcount == 1
                    # there already (ON CONFLICT does not lock it): keep it so, or store it
                    # again if a collector deleted it since
                    if not stored and conn.execute(self._q["chunk_held"], key).fetchone() is None:
                        stored = self._bound(conn, self._q["put_chunk"], params).rowcount == 1
                    if stored:
                        added += len(chunk.data)
            if missing:
                raise _Missing(missing)
            uses = [{"snapshot_id": snapshot_id, "digest": chunk.digest} for chunk in chunks]
            self._bound_many(conn, self._q["use_chunk"], uses)
            return added

        began = time.monotonic()
        try:
            added = self._write(work)
        except _Missing as gone:
            return ChunkWrite(stored_bytes=0, missing=tuple(gone.digests))
        self._wrote_in_bulk(added, time.monotonic() - began)
        return ChunkWrite(stored_bytes=added)

    def put_snapshot_files(self, snapshot_id: str, rows: Sequence[SnapshotFileRow]) -> None:
        """Insert entries of a snapshot's tree in one transaction."""

        params = [
            {
                "snapshot_id": snapshot_id,
                "path": row.path,
                "kind": row.kind,
                "mode": row.mode,
                "size": row.size,
                "mtime_ns": row.mtime_ns,
                "target": row.target,
                "chunks": row.chunks,
            }
            for row in rows
        ]

        def work(conn: Any) -> None:
            self._bound_many(conn, self._q["put_snapshot_file"], params)

        self._write(work)

    def finish_snapshot(
        self, snapshot_id: str, *, files: int, bytes: int, stored_bytes: int
    ) -> bool:
        """Mark an incomplete snapshot complete with its totals."""
        params = {"id": snapshot_id, "files": files, "bytes": bytes, "stored_bytes": stored_bytes}
        return self._write(
            lambda conn: bool(conn.execute(self._q["finish_snapshot"], params).rowcount == 1)
        )

    def get_snapshot(self, snapshot_id: str) -> SnapshotRow | None:
        """A snapshot by id."""
        rows = self._records("get_snapshot", {"id": snapshot_id}, SnapshotRow)
        return rows[0] if rows else None

    def run_snapshots(self, workflow_id: str) -> list[SnapshotRow]:
        """A run's complete snapshots, oldest first."""
        return self._records("run_snapshots", {"workflow_id": workflow_id}, SnapshotRow)

    def last_snapshot(self, workflow_id: str, name: str) -> SnapshotRow | None:
        """The run's latest complete snapshot of ``name``."""
        params = {"workflow_id": workflow_id, "name": name}
        rows = self._records("last_snapshot", params, SnapshotRow)
        return rows[0] if rows else None

    def snapshot_files(self, snapshot_id: str, *, after: str, limit: int) -> list[SnapshotFileRow]:
        """A page of a snapshot's entries in path order."""
        params = {"snapshot_id": snapshot_id, "after": after, "limit": limit}
        query = self._q["snapshot_files"]

        def work(conn: Any) -> list[SnapshotFileRow]:
            rows = _typed(self._bound(conn, query, params), SnapshotFileRow)
            return [
                row if row.chunks is None or type(row.chunks) is bytes else _as_bytes(row)
                for row in rows
            ]

        return self._run(work)

    def snapshot_chunk(self, digest: bytes) -> bytes | None:
        """A chunk's compressed bytes."""

        def work(conn: Any) -> bytes | None:
            row = self._bound(conn, self._q["snapshot_chunk"], {"digest": digest}).fetchone()
            return None if row is None else bytes(row[0])

        return self._run(work)

    def drop_snapshots(self, workflow_id: str) -> int:
        """Delete a run's snapshots with their entries and use rows."""
        return self._write(lambda conn: self._drop_snapshots_in(conn, workflow_id))

    def _drop_snapshots_in(self, conn: Any, workflow_id: str) -> int:
        """Inside a transaction (the one that deletes the run): delete its snapshots, their
        entries and use rows; how many snapshots. Their chunks stay for the collector."""
        key = {"workflow_id": workflow_id}
        conn.execute(self._q["drop_snapshot_uses"], key)
        conn.execute(self._q["drop_snapshot_files"], key)
        return int(conn.execute(self._q["drop_snapshots"], key).rowcount)


def _as_bytes(row: SnapshotFileRow) -> SnapshotFileRow:
    """``row`` with its chunk list as ``bytes`` (a driver may give a ``memoryview``)."""
    assert row.chunks is not None
    return SnapshotFileRow(
        row.path, row.kind, row.mode, row.size, row.mtime_ns, row.target, bytes(row.chunks)
    )
