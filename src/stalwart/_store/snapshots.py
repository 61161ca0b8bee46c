"""The snapshot role of the store: workspace trees kept as content-addressed chunks.

A chunk is stored once per store under the SHA-256 of its bytes (``snapshot_chunks``). A
snapshot is a row keyed by its id and found by its run; its entries are rows of their own
(``snapshot_files``), and ``snapshot_uses`` names each chunk it uses. A use row is written in
the transaction that checks its chunk is stored (``put_chunks``), so a chunk no use row names
is one nothing can still be counting on once that transaction is over: the proof a collector
of unused chunks needs. Writes come in bounded batches, each its own short transaction, so a
big snapshot never holds SQLite's write lock for long; the snapshot is visible only once
``finish_snapshot`` marked it complete. ``drop_snapshots`` deletes a run's snapshots (their
rows and use rows; chunks stay for the collector), what deleting the run does with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ChunkWrite", "SnapshotFileRow", "SnapshotRow", "SnapshotStore", "StoredChunk"]


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """A snapshot as stored."""

    id: str
    workflow_id: str
    name: str
    files: int
    bytes: int
    stored_bytes: int
    created_at: float
    complete: int


@dataclass(frozen=True, slots=True)
class SnapshotFileRow:
    """One entry of a snapshot's tree: ``kind`` ``file`` (its ``chunks``: 32-byte digests in
    order), ``dir`` or ``link`` (its ``target``); ``path`` is relative, ``/``-separated."""

    path: str
    kind: str
    mode: int
    size: int
    mtime_ns: int
    target: str | None
    chunks: bytes | None


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk to store: its digest, its size before compression and its compressed bytes
    (``None``: a chunk of the previous snapshot, which must be stored already)."""

    digest: bytes
    size: int
    data: bytes | None


@dataclass(frozen=True, slots=True)
class ChunkWrite:
    """What ``put_chunks`` did: the compressed bytes it added, or (nothing written) the
    chunks given without data that are not stored, to be given again with their data."""

    stored_bytes: int
    missing: tuple[bytes, ...] = ()


class SnapshotStore(Protocol):
    """Workspace snapshots: chunks, snapshot rows and their trees."""

    def begin_snapshot(self, snapshot_id: str, *, workflow_id: str, name: str, now: float) -> bool:
        """Insert an incomplete snapshot of run ``workflow_id``; ``False`` when no such run."""

    def put_chunks(
        self, snapshot_id: str, chunks: Sequence[StoredChunk], *, now: float
    ) -> ChunkWrite:
        """In one transaction: store the chunks given with data that are not stored yet and
        record that the snapshot uses every chunk given; a chunk given without data must be
        stored, else nothing is written and it is named in ``missing``."""

    def put_snapshot_files(self, snapshot_id: str, rows: Sequence[SnapshotFileRow]) -> None:
        """Insert entries of an incomplete snapshot's tree (one transaction)."""

    def finish_snapshot(
        self, snapshot_id: str, *, files: int, bytes: int, stored_bytes: int
    ) -> bool:
        """Mark an incomplete snapshot complete with its totals; ``False`` if it is gone."""

    def get_snapshot(self, snapshot_id: str) -> SnapshotRow | None:
        """A snapshot by id, complete or not."""

    def run_snapshots(self, workflow_id: str) -> list[SnapshotRow]:
        """A run's complete snapshots, oldest first."""

    def last_snapshot(self, workflow_id: str, name: str) -> SnapshotRow | None:
        """The run's latest complete snapshot called ``name``."""

    def snapshot_files(self, snapshot_id: str, *, after: str, limit: int) -> list[SnapshotFileRow]:
        """Up to ``limit`` entries of a snapshot whose path sorts after ``after``, in path
        order (bytewise: a folder before what it holds)."""

    def snapshot_chunk(self, digest: bytes) -> bytes | None:
        """The compressed bytes of a chunk; ``None`` when it is not stored."""

    def bulk_writes(self) -> AbstractContextManager[None]:
        """Big writes follow one another: let the backend pace them (a hint)."""

    def drop_snapshots(self, workflow_id: str) -> int:
        """Delete a run's snapshots, their entries and use rows (one transaction); how many."""
