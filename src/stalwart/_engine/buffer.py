"""One invocation's stream chunks that are not written yet (``stalwart.emit``).

``emit`` adds a chunk and returns: it never waits for the store, unless the chunks waiting
for it pass ``MAX_BUFFERED`` (the store is unreachable), when it waits for a write to succeed.
Whoever writes the chunks (the process's background flusher, or a step's outcome, which takes
them into its own transaction) holds ``writing`` from taking them until their transaction
ended, so two writes of one run never reorder its chunks; a write that failed puts them back
first in line.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

from .._store.base import NewChunk

__all__ = ["MAX_BUFFERED", "RunStream"]

T = TypeVar("T")

MAX_BUFFERED = 8 * 1024 * 1024  # bytes of chunks one run keeps waiting before emit blocks


class RunStream:
    """The chunks one invocation emitted that are not written yet."""

    def __init__(self, workflow_id: str, owner: str, ready: Callable[[RunStream], None]) -> None:
        self.workflow_id = workflow_id
        self.owner = owner
        self._ready = ready  # tells the flusher this run has chunks waiting
        self._cond = threading.Condition()
        self._pending: list[NewChunk] = []
        self._held = 0  # bytes taken or waiting, not yet written
        self.writing = threading.Lock()
        self._nonce = uuid.uuid4().hex[:12]  # this invocation's emits, told apart from others
        self._count = itertools.count()
        self.at_position: dict[str, int] = {}  # workflow code's emits at each journal position

    def origin(self) -> str:
        """A name for the next emit of a step attempt, unique to the run."""
        return f"{self._nonce}.{next(self._count)}"

    def add(self, chunk: NewChunk) -> None:
        """Queue ``chunk``; blocks only while ``MAX_BUFFERED`` bytes wait already."""
        with self._cond:
            while self._held >= MAX_BUFFERED:
                self._cond.wait(0.1)
            first = not self._pending
            self._pending.append(chunk)
            self._held += len(chunk.data)
        if first:
            self._ready(self)

    def has_pending(self) -> bool:
        """Whether chunks wait to be written, or are being written (a write that must come
        after them waits for ``writing``)."""
        return self._held > 0 or bool(self._pending)

    def take(self) -> list[NewChunk]:
        """Every waiting chunk, for a write (the caller holds ``writing``)."""
        with self._cond:
            chunks, self._pending = self._pending, []
        return chunks

    def put_back(self, chunks: list[NewChunk]) -> None:
        """``chunks`` were not written: first in line again."""
        if not chunks:
            return
        with self._cond:
            self._pending[:0] = chunks
        self._ready(self)

    def written(self, chunks: list[NewChunk]) -> None:
        """``chunks`` were written (or dropped with the lease): room for more."""
        with self._cond:
            self._held -= sum(len(chunk.data) for chunk in chunks)
            self._cond.notify_all()

    def write_with(self, write: Callable[[list[NewChunk]], T]) -> T:
        """Take the waiting chunks and ``write`` them (``writing`` held throughout, so the
        run's chunks keep their order); put back when ``write`` raises."""
        with self.writing:
            chunks = self.take()
            try:
                result = write(chunks)
            except BaseException:
                self.put_back(chunks)
                raise
            self.written(chunks)
            return result
