"""The stream role of the store: the chunks runs emit (``stalwart.emit``), append-only.

A chunk's row is keyed by its run, its stream and its offset (0, 1, 2, ... per run and stream,
given as the row is inserted: gap-free, in commit order). Chunks are written only while their
writer holds the run's lease, in batches: a stream-only batch of many runs at once
(``append_chunks``), or with a step's outcome in the transaction that journals it (the
``chunks`` of ``JournalStore.append``). Each chunk names the emit that made it (``origin``,
unique per run), so a batch written again (retried after a lost acknowledgement, or replayed
workflow code emitting again) adds nothing. Readers page through a stream by offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ChunkRow", "NewChunk", "RunChunks", "StreamStore"]


@dataclass(frozen=True, slots=True)
class NewChunk:
    """A chunk to write: its offset is given by the store."""

    stream: str
    seq: int | None
    attempt: int
    origin: str  # names the emit, unique per run
    data: bytes
    at: float


@dataclass(frozen=True, slots=True)
class RunChunks:
    """The chunks one run's lease holder ``owner`` writes in a stream-only batch."""

    workflow_id: str
    owner: str
    chunks: Sequence[NewChunk]


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk as stored."""

    offset: int
    stream: str
    seq: int | None
    attempt: int
    data: bytes
    at: float


class StreamStore(Protocol):
    """Runs' streams: written in batches by lease holders, read by offset."""

    def append_chunks(self, batch: Sequence[RunChunks]) -> list[bool]:
        """Write each run's chunks, in one transaction; for each, whether its owner still
        held the lease (a run whose lease is lost gets nothing written)."""

    def read_chunks(
        self, workflow_id: str, *, stream: str, after: int, limit: int
    ) -> list[ChunkRow]:
        """Up to ``limit`` chunks of the run's ``stream`` with offsets over ``after``, in
        order."""
