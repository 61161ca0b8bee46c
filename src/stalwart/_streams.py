"""Reading a run's stream: ``app.stream`` and ``app.stream_async``.

A reader pages through the chunks by offset. Following, it reads the run's status *before*
each page: a run's chunks are all written before it ends (its engine writes what waits
first), so a page read after the run was seen ended (or in ``needs_attention``) holds every
chunk that remains, and an empty one ends the stream. Between pages it waits on the store's
change signal (PostgreSQL's ``NOTIFY``, SQLite's ``data_version``), rereading anyway at
intervals growing from 10 ms to half a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from . import _inputs
from ._chunks import StreamChunk
from ._model import TERMINAL, RunStatus, from_epoch
from ._store.base import ChunkRow
from ._views import Views

__all__ = ["StreamReads"]

PAGE = 500  # chunks one read returns at most
_ENDED = TERMINAL | {RunStatus.NEEDS_ATTENTION}
_FIRST_REREAD, _LONGEST_REREAD = 0.01, 0.5


@dataclass
class StreamRead:
    """What a reader asked for."""

    workflow_id: str
    stream: str
    after: int
    follow: bool
    timeout: float | None


def _checked(views: Views, read: StreamRead, call: str) -> StreamRead:
    if not isinstance(read.stream, str) or not read.stream:
        raise ValueError(f"{call}(stream={read.stream!r}): a stream is named by a non-empty str")
    if isinstance(read.after, bool) or not isinstance(read.after, int) or read.after < -1:
        raise ValueError(
            f"{call}(after={read.after!r}): give the offset of the last chunk seen (an int, "
            "-1 for the start)"
        )
    read.timeout = _inputs.limit(read.timeout, "timeout", call)
    views.row(read.workflow_id)  # WorkflowNotFound for an unknown id
    return read


def _chunk(views: Views, row: ChunkRow) -> StreamChunk:
    data = views.runtime.codec.decode(row.data)
    at = from_epoch(row.at)
    assert at is not None
    return StreamChunk(row.offset, row.stream, row.seq, row.attempt, data, at)


class _Waiting:
    """When a following reader gives up (``timeout`` without a chunk) and how long it waits
    before it rereads without a signal."""

    def __init__(self, read: StreamRead) -> None:
        self.read = read
        self.last = time.monotonic()
        self.every = _FIRST_REREAD

    def got(self) -> None:
        self.last = time.monotonic()
        self.every = _FIRST_REREAD

    def pause(self) -> float:
        timeout = self.read.timeout
        left = None if timeout is None else self.last + timeout - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError(
                f"no chunk of run {self.read.workflow_id!r}'s stream {self.read.stream!r} "
                f"for {timeout}s"
            )
        pause, self.every = self.every, min(self.every * 2, _LONGEST_REREAD)
        return pause if left is None else min(pause, left)


def read_stream(views: Views, read: StreamRead) -> Iterator[StreamChunk]:
    """The chunks of ``read``'s stream past its ``after`` (see ``app.stream``), ``read``
    checked already."""
    store, changes = views.runtime.store, views.runtime.store.stream_changes
    waiting = _Waiting(read)
    after = read.after
    while True:
        seen = changes.current()
        status = views.row(read.workflow_id).status if read.follow else None
        rows = store.read_chunks(read.workflow_id, stream=read.stream, after=after, limit=PAGE)
        for row in rows:
            yield _chunk(views, row)
            after = row.offset
        if len(rows) == PAGE:
            continue
        if not read.follow or (not rows and status in _ENDED):
            return
        if rows:
            waiting.got()
            continue
        changes.wait(seen, waiting.pause())


async def read_stream_async(views: Views, read: StreamRead) -> AsyncIterator[StreamChunk]:
    """``read_stream`` for a coroutine: the event loop never waits on the store."""
    read = await asyncio.to_thread(_checked, views, read, "app.stream_async")
    store, changes = views.runtime.store, views.runtime.store.stream_changes
    waiting = _Waiting(read)
    after = read.after
    while True:
        seen = await asyncio.to_thread(changes.current)
        status = None
        if read.follow:
            status = (await asyncio.to_thread(views.row, read.workflow_id)).status
        rows = await asyncio.to_thread(
            store.read_chunks, read.workflow_id, stream=read.stream, after=after, limit=PAGE
        )
        for row in rows:
            yield _chunk(views, row)
            after = row.offset
        if len(rows) == PAGE:
            continue
        if not read.follow or (not rows and status in _ENDED):
            return
        if rows:
            waiting.got()
            continue
        await changes.wait_async(seen, waiting.pause())


class StreamReads:
    """The stream readers of :class:`~stalwart.Stalwart`."""

    _views: Views

    def stream(
        self,
        workflow_id: str,
        *,
        stream: str = "default",
        after: int = -1,
        follow: bool = True,
        timeout: float | None = None,
    ) -> Iterator[StreamChunk]:
        """The chunks of the run's ``stream`` with offsets over ``after``, in order. With
        ``follow``, waits for new ones and stops after the last chunk once the run is terminal
        or in ``needs_attention``; no chunk for ``timeout`` seconds raises
        :class:`TimeoutError`. :class:`WorkflowNotFound` for an unknown id (raised at once)."""
        read = _checked(
            self._views, StreamRead(workflow_id, stream, after, follow, timeout), "app.stream"
        )
        return read_stream(self._views, read)

    def stream_async(
        self,
        workflow_id: str,
        *,
        stream: str = "default",
        after: int = -1,
        follow: bool = True,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """:meth:`stream` as an async iterator (``async for chunk in app.stream_async(id)``)."""
        read = StreamRead(workflow_id, stream, after, follow, timeout)
        return read_stream_async(self._views, read)
