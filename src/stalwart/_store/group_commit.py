"""Group commit: the writes that threads of one process make together share one transaction.

A leader/follower scheme. A thread that finds no commit under way becomes the leader and
commits what is queued (its own write alone, when nobody else is writing: a lone run pays
nothing for it). Callers that arrive while a commit is under way
queue up and wait; when that commit ends, the first of them leads the next one, taking
everything queued by then. Each caller returns only after the transaction holding its write
committed (or with its own error): nothing is acknowledged that a crash could still lose.

An ``async def`` caller (``submit_async``: a step of an async workflow, on the event loop its
run shares with others) never waits for a commit while others on its loop could run: its write
is queued like any other, and the caller awaits the commit. Who leads that commit depends on
the loop and the store. Where the store's commits are local (``in_place``: SQLite) and the loop
is one an app keeps for its own runs (``own_loop``: never a caller's, which serves the caller's
code too), the loop leads it itself, in place: a lone async run's write at once, and the
writes of many runs once what was ready on the loop has run (every run there that reached a
commit meanwhile has queued its write: ``_lead_on_loop``), all in one transaction. Handing a
batch to a thread and its callers back costs more than such a commit, which holds the
interpreter's lock for most of its time anyway. Such a commit never waits for the database: it
runs with ``NO_WAIT`` set, and a store that would have to wait (for a write lock another
process holds, for disk space, for more than a moment for another thread of this process to
finish with the connection) raises ``WouldWait`` having written nothing; those writes go back
to the head of the queue for the pipeline's threads, and the loop goes on. Elsewhere (a
caller's loop, a store a network could stall), and while a commit is under way, the pipeline's
own threads (started on first use) lead the async callers' batches. ``after`` runs on the
loop too after a commit led there: keep it quick. An async caller cancelled while it waits
withdraws its write if no batch took it yet (nothing was written: its caller sees the
cancellation); once a batch holds it, it waits for that commit whatever happens and returns
what it decided, so that what the caller saw is what the journal says.

What a transaction does with a batch is the store's business (``commit`` below); this module
only decides who commits what, and when. ``after``, where given, is called by the leader once
its batch's callers are woken and the next leader named, outside every lock: upkeep that must
not hold up the next commit (SQLite copies its write-ahead log there, ``checkpoints.py``).
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import contextvars
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from .._errors import StoreError

__all__ = ["NO_WAIT", "GroupCommit", "Pending", "WouldWait", "own_loop", "settled"]

T = TypeVar("T")

# The most writes one transaction takes; the rest wait for the next, so one batch's latency
# stays bounded however many threads pile up.
BATCH_LIMIT = 256


# Set while a commit is led in place on an event loop: the store must not wait (see the
# module's docstring), and raises ``WouldWait`` where it would.
NO_WAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("stalwart_no_wait", default=False)


class WouldWait(Exception):
    """A write led in place (``NO_WAIT``) would have had to wait; nothing was written."""


# A write that neither committed nor failed (its commit was interrupted): ``outcome`` raises.
_UNSETTLED = BaseException()


class Pending(Generic[T]):
    """One write queued for the next commit, and its outcome once that commit ended."""

    __slots__ = ("_error", "_value", "done", "lead", "resolved", "waiter", "write")

    def __init__(self, write: T) -> None:
        self.write = write
        # What a follower waits on (a leader: none): a lock taken at once, which the commit
        # that settles the write releases (cheaper to wake than an Event).
        self.done: _thread.LockType | None = None
        # What an async caller awaits instead, on its loop (it never leads).
        self.waiter: asyncio.Future[None] | None = None
        self.resolved = False  # (on the waiter's loop) the commit that settled it has ended
        self.lead = False  # set when this waiting caller must lead the next commit
        self._value: Any = None
        self._error: BaseException | None = _UNSETTLED  # built when raised: most settle

    def settle(self, value: Any) -> None:
        """The write's transaction committed and it decided ``value``."""
        self._value, self._error = value, None

    def fail(self, error: BaseException) -> None:
        """The write did not commit: its caller raises ``error``."""
        self._error = error

    def outcome(self) -> Any:
        """The write's value, or its error raised."""
        if self._error is not None:
            if self._error is _UNSETTLED:
                raise StoreError(
                    "a write was not committed: the thread committing its batch was interrupted"
                )
            raise self._error
        return self._value


class GroupCommit(Generic[T]):
    """Batches writes of type ``T`` that arrive together; ``commit`` settles or fails each of
    a batch's ``Pending`` (it must not raise); ``after`` gets the number of writes of each
    batch committed, once its callers are woken."""

    def __init__(
        self,
        commit: Callable[[list[Pending[T]]], None],
        after: Callable[[int], None] | None = None,
        *,
        in_place: bool = False,
    ) -> None:
        self._commit = commit
        self._after = after
        # Whether an async caller alone on its loop commits its write itself (``submit_async``):
        # for a store whose commit is quick and local (SQLite), not one a network could stall.
        self._in_place = in_place
        self._lock = threading.Lock()
        self._queue: list[Pending[T]] = []
        self._busy = False
        # The threads that lead the batches async callers head (two: one can copy SQLite's
        # log in ``after`` while the other commits), and whether the store closed (then a
        # batch is led by a thread of its own).
        self._leader: ThreadPoolExecutor | None = None
        self._closed = False
        # The loops that will lead a commit once what is ready on them ran (``_lead_on_loop``).
        self._scheduled: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        me = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget_in_child(me))

    def _forget(self) -> None:
        """In a forked child: no commit is under way there, whatever the parent was doing,
        and its threads are gone (the parent's writes are the parent's)."""
        self._lock = threading.Lock()
        self._queue = []
        self._busy = False
        self._leader = None
        self._scheduled = weakref.WeakSet()

    def close(self) -> None:
        """Let the pipeline's own threads end, once they have committed what they lead."""
        with self._lock:
            self._closed = True
            leader, self._leader = self._leader, None
        if leader is not None:
            leader.shutdown(wait=True)

    async def submit_async(self, write: T) -> Any:
        """``submit`` for a caller on an event loop: the loop goes on while the write waits
        for its commit, which the pipeline's own thread leads where this caller would."""
        loop = asyncio.get_running_loop()
        if self._in_place and loop in _OWN_LOOPS and not _others_ready(loop):
            with self._lock:
                leading = not self._busy
                if leading:
                    self._busy = True
            if leading:
                # Nothing else on this loop could run meanwhile: one commit here costs less
                # than handing it to a thread and back (a lone async run's every step).
                pending = Pending(write)
                self._lead([pending], no_wait=True)
                if not isinstance(pending._error, WouldWait):
                    return pending.outcome()
                return await self._queued_async(write, loop)  # a thread commits it
        if self._in_place and loop in _OWN_LOOPS:
            return await self._queued_async(write, loop, on_loop=True)
        return await self._queued_async(write, loop)

    async def _queued_async(
        self, write: T, loop: asyncio.AbstractEventLoop, *, on_loop: bool = False
    ) -> Any:
        """``submit_async`` through the queue: the pipeline's own thread leads its commit, or
        (``on_loop``) the loop itself, once what is ready on it has run (``_lead_on_loop``)."""
        pending = Pending(write)
        pending.waiter = waiter = loop.create_future()  # (set before it is queued)
        with self._lock:
            leading = not self._busy
            self._queue.append(pending)
            if leading and on_loop:
                leading = False  # (the commit is not claimed yet: whoever comes first leads)
                if loop not in self._scheduled:
                    self._scheduled.add(loop)
                    loop.call_soon(self._lead_on_loop, loop)
            elif leading:
                self._busy = True
        if leading:
            self._lead_elsewhere()
        task = asyncio.current_task()
        asked = 0 if task is None else task.cancelling()  # cancellations asked before this
        try:
            await waiter  # (not shielded: a cancellation cancels it, and is handled below)
        except asyncio.CancelledError:
            if self._withdraw(pending):
                raise
            if not pending.resolved:  # a batch holds it: it commits, so wait, on a new waiter
                waiter = pending.waiter = loop.create_future()
            await settled(waiter, task, asked)
        return pending.outcome()

    def _lead_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """(On ``loop``, after what was ready on it ran: every run there that reached a
        commit meanwhile has queued its write) Commit what is queued, in place, unless a
        commit is under way (its leader names the next, as for any write queued meanwhile)."""
        with self._lock:
            self._scheduled.discard(loop)
            if self._busy or not self._queue:
                return
            self._busy = True
            batch = self._queue[:BATCH_LIMIT]
            del self._queue[:BATCH_LIMIT]
        self._lead(batch, no_wait=True, loop=loop)

    def _withdraw(self, pending: Pending[T]) -> bool:
        """Take ``pending`` out of the queue if no batch took it yet."""
        with self._lock:
            if pending not in self._queue:
                return False
            self._queue.remove(pending)
            return True

    def _lead_elsewhere(self) -> None:
        """Have one of the pipeline's own threads lead the next commit."""
        with self._lock:
            if not self._closed and self._leader is None:
                self._leader = ThreadPoolExecutor(2, thread_name_prefix="stalwart-commit")
            leader = None if self._closed else self._leader
        try:
            if leader is not None:
                leader.submit(self._lead)
                return
        except RuntimeError:  # shut down meanwhile: the store closes
            pass
        try:
            threading.Thread(target=self._lead, name="stalwart-commit", daemon=True).start()
        except RuntimeError:  # no thread can start (the interpreter exits): lead here
            self._lead()

    def submit(self, write: T) -> Any:
        """Queue ``write``, wait until the transaction holding it committed, return what it
        decided (or raise its error)."""
        pending = Pending(write)
        with self._lock:
            leading = not self._busy
            if leading:  # (ahead of writes a loop queued for its own turn: its batch holds it)
                self._queue.insert(0, pending)
                self._busy = True
            else:
                self._queue.append(pending)
                done = pending.done = _thread.allocate_lock()
                done.acquire()
        if not leading:
            done.acquire()
            if not pending.lead:
                return pending.outcome()
            pending.done = None  # it leads now: its own batch's commit has no one to wake
        self._lead()
        return pending.outcome()

    def submit_all(self, writes: list[T], *, raising: bool = True) -> list[Any]:
        """Queue ``writes`` together (so one transaction takes them all, unless more than
        ``BATCH_LIMIT`` are queued), wait until each committed, return what each decided in
        order; raise the first error once every write settled (without ``raising``: each
        error in its write's place, if an ``Exception``)."""
        pendings = [Pending(write) for write in writes]
        for pending in pendings:
            done = pending.done = _thread.allocate_lock()
            done.acquire()
        with self._lock:
            if not self._busy and pendings:
                self._queue[:0] = pendings  # (ahead of writes a loop queued for its own turn)
                self._busy = True
                pendings[0].lead = True
                pendings[0].done.release()  # type: ignore[union-attr]
            else:
                self._queue.extend(pendings)
        # In queue order: a write of this caller's named to lead the next commit comes after
        # every earlier one of them is settled (the queue is first in, first out).
        for pending in pendings:
            pending.done.acquire()  # type: ignore[union-attr]
            if pending.lead:
                pending.done = None  # it leads: its own batch's commit has no one to wake
                self._lead()
        if raising:
            return [pending.outcome() for pending in pendings]
        return [_outcome_or_error(pending) for pending in pendings]

    def _lead(
        self,
        batch: list[Pending[T]] | None = None,
        *,
        no_wait: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Commit ``batch`` (by default, what is queued, up to ``BATCH_LIMIT``), wake its
        callers and name the next leader; with ``no_wait``, the commit alone runs with
        ``NO_WAIT`` set (never what follows it: a thread started here would inherit it where
        threads inherit the context, as on Python 3.14's free-threaded builds). ``loop``: the
        event loop leading it (``_lead_on_loop``), whose callers are woken in place, and whose
        writes that would have waited go back to the head of the queue, for a thread."""
        if batch is None:
            with self._lock:
                batch = self._queue[:BATCH_LIMIT]
                del self._queue[:BATCH_LIMIT]
        # (a batch can be empty: the async caller it was led for withdrew its write meanwhile)
        try:
            if no_wait:
                token = NO_WAIT.set(True)
                try:
                    self._commit(batch)
                finally:
                    NO_WAIT.reset(token)
                if loop is not None:
                    batch = self._requeue_would_wait(batch)
                elif isinstance(batch[0]._error, WouldWait):
                    batch = []  # nothing was written (its upkeep below counts no write)
            else:
                self._commit(batch)
        finally:
            with self._lock:
                successor = self._queue[0] if self._queue else None
                if successor is None:
                    self._busy = False
                elif successor.waiter is None:
                    successor.lead = True
            woken: dict[asyncio.AbstractEventLoop, list[Pending[T]]] = {}
            for pending in batch:
                if pending.done is not None:
                    pending.done.release()
                elif pending.waiter is not None:
                    woken.setdefault(pending.waiter.get_loop(), []).append(pending)
            for other, pendings in woken.items():  # one wake-up of each loop for its batch
                if other is loop:
                    _resolve(pendings)
                    continue
                with contextlib.suppress(RuntimeError):  # closed: nobody awaits them any more
                    other.call_soon_threadsafe(_resolve, pendings)
            if successor is not None:
                if successor.waiter is not None:
                    self._lead_elsewhere()
                elif successor.done is not None:
                    successor.done.release()
        if self._after is not None:
            self._after(len(batch))

    def _requeue_would_wait(self, batch: list[Pending[T]]) -> list[Pending[T]]:
        """The writes of ``batch`` that were written or failed; those that would have waited
        (nothing of them was written) go back to the head of the queue, unsettled."""
        again = [pending for pending in batch if isinstance(pending._error, WouldWait)]
        if not again:
            return batch
        for pending in again:
            pending._error = _UNSETTLED
        with self._lock:
            self._queue[:0] = again
        return [pending for pending in batch if pending._error is not _UNSETTLED]


async def settled(waiter: asyncio.Future[Any], task: asyncio.Task[Any] | None, asked: int) -> None:
    """Wait for ``waiter`` however often ``task`` is cancelled meanwhile, then take back the
    cancellations asked since it had ``asked`` of them: the write the caller returns was
    committed, so the caller goes on as if they had come a moment later (and were not seen)."""
    while not waiter.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(waiter)
    if task is not None:
        while task.cancelling() > asked:
            task.uncancel()


# The loops an app keeps for its own async runs (``own_loop``): only their writes may commit
# in place, never those of a caller's loop (``run_async``), which serves the caller's code too.
_OWN_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def own_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Mark ``loop`` as one an app keeps for its async runs alone (see ``submit_async``)."""
    _OWN_LOOPS.add(loop)


def _others_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether anything else on ``loop`` is ready to run now (on a loop that does not say,
    such as uvloop's: assumed so)."""
    ready = getattr(loop, "_ready", None)
    return ready is None or len(ready) > 0


def _outcome_or_error(pending: Pending[Any]) -> Any:
    try:
        return pending.outcome()
    except Exception as exc:
        return exc


def _forget_in_child(pipeline: weakref.ref[GroupCommit[Any]]) -> None:
    found = pipeline()
    if found is not None:
        found._forget()


def _resolve(pendings: list[Pending[Any]]) -> None:
    """(On their loop) The commit that settled these writes ended: wake their callers (a
    caller cancelled meanwhile made a new waiter, unless it saw this first)."""
    for pending in pendings:
        pending.resolved = True
        waiter = pending.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
