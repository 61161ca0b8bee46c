"""What an invocation journals while it holds the run's lease: a step's outcome (from a thread,
or awaited from the run's event loop), several entries at once, a retry's marker. Each write is
fenced by the lease (``LeaseLost`` when another worker took the run over), carries the stream
chunks emitted before it, and turns a store failure into a signal workflow code cannot catch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from .._errors import CorruptRecord, StoreError
from .._signals import LeaseLost, LoopClosed, StoreFailed
from .._store import Entry
from .._store.base import CursorStore, NewChunk
from .._store.group_commit import settled
from .flags import Flag

if TYPE_CHECKING:
    from .._runtime import Runtime
    from .buffer import RunStream

__all__ = ["JournalWrites"]

T = TypeVar("T")


class JournalWrites:
    """The journal writes of an ``Invocation`` (its base: the attributes below are its)."""

    runtime: Runtime
    store: CursorStore
    workflow_id: str
    owner: str
    stream: RunStream | None
    lease_lost: Flag

    loop: asyncio.AbstractEventLoop | None  # where its async code runs (None: the app's)
    caller_gone: threading.Event | None  # set: run_async's caller gave up
    is_async: bool
    deferring: bool
    deferred: list[Entry]  # entries journaled at the next boundary (see ``defers``)
    lost_outcomes: list[Entry]

    # An async run's flush of its deferred entries (``flush_async``): one at a time, and the
    # last one's end, which a flush made in a thread (``flush_deferred``) waits for.
    _flush_turn: asyncio.Lock | None = None
    _flushed: threading.Event | None = None

    def _closing_now(self) -> bool:
        """Whether the run's loop is closing or its ``run_async`` caller gave up, as far as
        is known at this moment (``loop_gone.cancelled_by_closing`` without its grace)."""
        loop, gone = self.loop, self.caller_gone
        if loop is None:
            return self.runtime.loop.closing
        return loop.is_closed() or (gone is not None and gone.is_set())

    def lost_loop(self, why: str) -> LoopClosed:
        """(``Invocation``'s) The signal that gives the run back as its loop closes."""
        raise NotImplementedError

    @contextmanager
    def journaling(self) -> Iterator[None]:
        """Store calls made on behalf of workflow code: a store failure becomes a signal that
        user code cannot catch, and never the run's outcome."""
        try:
            yield
        except CorruptRecord:
            raise
        except StoreError as exc:
            raise StoreFailed(exc) from exc

    def append(self, entry: Entry) -> None:
        """Journal ``entry`` while this invocation still holds the run's lease (with the
        stream chunks emitted before it, in its transaction)."""
        try:  # inline rather than journaling(): this runs once per step
            stream = self.stream
            if stream is None or not stream.has_pending():  # no chunks wait: the common case
                held = self.store.append(self.workflow_id, entry, owner=self.owner)
            else:
                held = _append_with_chunks(self, entry)
        except CorruptRecord:
            raise
        except StoreError as exc:
            raise StoreFailed(exc) from exc
        _fenced(self, held)

    async def append_async(self, entry: Entry) -> None:
        """``append`` from the run's event loop, which goes on (with the other runs' tasks)
        while ``entry`` waits for the transaction it shares with their writes to commit."""
        stream = self.stream
        if stream is not None and stream.has_pending():
            # Written with its chunks by a thread of the engine's (their lock is held by
            # threads), and awaited to the end: a write under way is not taken back, and the
            # caller returns the outcome it committed (the cancellations are taken back).
            task = asyncio.current_task()
            asked = 0 if task is None else task.cancelling()
            written = self.runtime.loop.blocking(self.append, entry)
            await settled(written, task, asked)
            written.result()  # (what ``append`` raised)
            return
        with self.journaling():
            held = await self.store.append_async(self.workflow_id, entry, owner=self.owner)
        _fenced(self, held)

    async def off_loop(self, write: Callable[[], T]) -> T:
        """``write()``, a blocking store call, made by a thread of the engine's while the run's
        event loop goes on. A write under way is not taken back: a cancellation that comes
        meanwhile takes effect once it ended (``CancelledError`` then, the write kept), as it
        would have at the caller's next ``await`` had the write blocked the loop."""
        value, cancelled = await self.made_off_loop(write)
        if cancelled:
            raise asyncio.CancelledError
        return value

    async def made_off_loop(self, write: Callable[[], T]) -> tuple[T, bool]:
        """:meth:`off_loop`, saying whether a cancellation came meanwhile instead of raising
        it (its caller delivers it once its own bookkeeping of the write is done). The loop
        closing does not wait for the write: the run is given back (``LoopClosed``) at once,
        and the write, fenced by the lease it then releases, lands before or not at all."""
        written = self.runtime.loop.blocking(write)
        cancelled = False
        while not written.done():
            try:
                await asyncio.shield(written)
            except asyncio.CancelledError:
                cancelled = True
                if self._closing_now():
                    raise self.lost_loop("its event loop closed while it journaled") from None
        return written.result(), cancelled  # (or what ``write`` raised, first)

    def append_many(self, entries: list[Entry]) -> None:
        """Journal ``entries`` in one transaction while this invocation holds the lease."""
        wid, owner = self.workflow_id, self.owner
        with self.journaling():
            held = _with_chunks(
                self, lambda c: self.store.append_many(wid, entries, owner=owner, **_given(c))
            )
        _fenced(self, held)

    def defers(self) -> bool:
        """Whether entries wait to be journaled at this boundary, before what comes next: a
        sync workflow's step outcomes, while its own code runs (``defer_outcome``); an async
        workflow's recorded values (``record_value``) and outcomes its tasks left, and those
        another of its tasks is writing (``flush_async``: what comes next waits for them)."""
        if self.is_async:
            return bool(self.deferred) or self.flushing()
        return bool(self.deferred) and self.deferring

    def flushing(self) -> bool:
        """Whether an async flush of deferred entries is being written."""
        return self._flushed is not None and not self._flushed.is_set()

    def take_deferred(self) -> list[Entry]:
        """The deferred entries, for a transaction that journals them (once an async flush
        under way has ended)."""
        if self._flushed is not None:
            self._flushed.wait()
        entries, self.deferred = self.deferred, []
        return entries

    def flush_deferred(self) -> None:
        """Journal the deferred entries now, in this thread (``LeaseLost`` if the lease is
        gone)."""
        self._write_deferred(self.take_deferred())

    def _write_deferred(self, entries: list[Entry]) -> None:
        """Journal ``entries`` taken from ``deferred``; those the store failed to write go
        back first in line (the workflow's code already has their values: they stay owed)."""
        try:
            if len(entries) == 1:
                self.append(entries[0])
            elif entries:
                self.append_many(entries)
        except LeaseLost:
            self.lost_outcomes += entries
            raise
        except StoreFailed:
            self.deferred[:0] = entries
            raise

    async def flush_async(self) -> None:
        """(An async run, at a boundary: ``defers``) ``flush_deferred`` made off the run's
        loop, after any other task's flush under way (what this task does next may use the
        values it writes). A cancellation meanwhile takes effect once the entries are written;
        entries the store failed to write wait, first, for the next flush or the run's end."""
        turn = self._flush_turn
        if turn is None:
            turn = self._flush_turn = asyncio.Lock()
        async with turn:
            entries, self.deferred = self.deferred, []
            if not entries:
                return
            done = self._flushed = threading.Event()

            def write() -> None:
                try:
                    self._write_deferred(entries)  # (failed ones back before ``done``)
                finally:
                    done.set()

            await self.off_loop(write)

    def mark_retry(self, marker: str) -> None:
        """Note on the run that an attempt begins (``marker`` names it), so a crash in it is
        charged and one before it is not."""
        with self.journaling():
            held = self.store.mark_retry(self.workflow_id, owner=self.owner, marker=marker)
        _fenced(self, held)


def _fenced(inv: JournalWrites, held: bool) -> None:
    """After a write fenced by the lease: ``LeaseLost`` when it found the lease gone."""
    if not held:
        inv.lease_lost.set()
        raise LeaseLost()


def _given(chunks: Sequence[NewChunk]) -> dict[str, Sequence[NewChunk]]:
    """The ``chunks`` keyword of a journal write, when there are any (a store that never
    streams need not take it)."""
    return {"chunks": chunks} if chunks else {}


def _append_with_chunks(inv: JournalWrites, entry: Entry) -> bool:
    """Journal ``entry`` with the run's waiting stream chunks, in one transaction."""
    wid, owner = inv.workflow_id, inv.owner
    return _with_chunks(inv, lambda c: inv.store.append(wid, entry, owner=owner, **_given(c)))


def _with_chunks(inv: JournalWrites, write: Callable[[Sequence[NewChunk]], bool]) -> bool:
    """``write`` a journal entry with the run's waiting stream chunks (none when none wait)."""
    stream = inv.stream
    if stream is None or not stream.has_pending():
        return write(())
    held = stream.write_with(write)
    inv.runtime.store.stream_changes.push()  # readers in this process (it moves no data_version)
    return held
