"""Runs' streams over SQL: chunks written in batches, fenced by the lease, read by offset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..streams import ChunkRow, NewChunk, RunChunks
from ._base import _typed
from .pipeline import Pipelined, Write

__all__ = ["StreamVerbs"]


def _idempotent(_decided: object) -> bool:
    return False  # chunks are found again by their origin: a batch written twice adds nothing


class StreamVerbs(Pipelined):
    """The ``StreamStore`` verbs over SQL."""

    def append_chunks(self, batch: Sequence[RunChunks]) -> list[bool]:
        """Write each run's chunks in one transaction of the pipeline (which may share it
        with other writes of this process); for each, whether its owner held the lease."""
        if not batch:
            return []

        # runs locked in one order, so two batches never wait for each other's locks
        order = sorted(range(len(batch)), key=lambda i: batch[i].workflow_id)

        def work(conn: Any) -> list[bool]:
            held = [False] * len(batch)
            for i in order:
                run = batch[i]
                held[i] = self._put_chunks(conn, run.workflow_id, run.owner, run.chunks)
            return held

        def alone() -> list[bool]:
            return self._write(work)

        write = Write(batch[0].workflow_id, work, alone, wrote=_idempotent)
        return list(self._batched(write))

    def _put_chunks(
        self, conn: Any, workflow_id: str, owner: str, chunks: Sequence[NewChunk]
    ) -> bool:
        """Inside a transaction: ``chunks`` appended to their streams if ``owner`` holds the
        run's lease (locked first, so this run's writers take offsets one after another)."""
        self._lock_run(conn, workflow_id)
        fence = {"workflow_id": workflow_id, "owner": owner}
        if conn.execute(self._q["chunk_fence"], fence).fetchone() is None:
            return False
        if chunks:
            self._insert_chunks(conn, workflow_id, chunks)
        return True

    def _insert_chunks(self, conn: Any, workflow_id: str, chunks: Sequence[NewChunk]) -> None:
        """Inside the run's locked transaction: insert ``chunks`` (a backend may do it in one
        statement)."""
        rows = [
            {
                "workflow_id": workflow_id,
                "stream": chunk.stream,
                "seq": chunk.seq,
                "attempt": chunk.attempt,
                "origin": chunk.origin,
                "data": chunk.data,
                "at": chunk.at,
            }
            for chunk in chunks
        ]
        conn.cursor().executemany(self._q["append_chunk"], rows)

    def read_chunks(
        self, workflow_id: str, *, stream: str, after: int, limit: int
    ) -> list[ChunkRow]:
        """Up to ``limit`` chunks of the run's ``stream`` past offset ``after``, in order."""
        params = {"workflow_id": workflow_id, "stream": stream, "after": after, "limit": limit}
        query = self._q["read_chunks"]

        def work(conn: Any) -> list[ChunkRow]:
            rows = _typed(conn.execute(query, params), ChunkRow)
            return [row if isinstance(row.data, bytes) else _as_bytes(row) for row in rows]

        return self._run(work)


def _as_bytes(row: ChunkRow) -> ChunkRow:
    return ChunkRow(row.offset, row.stream, row.seq, row.attempt, bytes(row.data), row.at)
