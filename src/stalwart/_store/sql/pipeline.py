"""The write pipeline: a run's hot writes (creating it, taking its lease, a step's outcome, a
retry's marker, the run's end) go through the store's ``GroupCommit``, so the runs a worker
executes at once share transactions.

Each write is a ``Write``: ``work(conn)`` does it inside a transaction other writes share, and
reads its precondition from row counts (a lost lease makes it return ``False`` having
written nothing, never raise), so one write's failed precondition leaves the others of its
batch to commit; ``alone()`` does the same write in a transaction of its own. A batch of one
is done alone (the cheapest path for a lone run); a batch whose transaction raises is rolled
back and each of its writes done alone, so an unexpected error is reported to its own caller.

Where the backend can (PostgreSQL's pipeline mode), a batch whose every write is one
statement that can be sent ahead (``send``) goes out whole: ``BEGIN``, the statements and
``COMMIT`` in one round trip, each write's precondition still in its statement's ``WHERE``
and read from its row count once the answers are back.

A batch is retried whole when its connection is lost; each write carries an id (``CALL_ID``)
stamped on the journal entry it writes, and a retry after a try that may have committed
first looks for that entry, as ``SQLBase._once`` does for one write.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from ..base import Entry
from ..group_commit import NO_WAIT, GroupCommit, Pending, WouldWait
from ._base import CALL_ID, SQLBase
from .call_ids import new_call_id

__all__ = ["Pipelined", "Write"]


@dataclass(slots=True)
class Write:
    """One write of the pipeline (see the module's docstring)."""

    workflow_id: str
    work: Callable[[Any], Any]
    alone: Callable[[], Any]
    # Whether what ``work`` decided means it journaled an entry (carrying ``call_id``, which
    # tells a retry that the batch landed); a write that journals nothing must be idempotent.
    wrote: Callable[[Any], bool] = bool
    # ``work`` in two halves, for a batch whose statements are all sent before any answer is
    # read (PostgreSQL's pipeline mode): send the statement, then, once all are answered,
    # what it decided.
    send: Callable[[Any], Callable[[], Any]] | None = None
    # What a write with ``send`` decided when refused, and when it wrote: a batch sent whole
    # whose acknowledgement was lost tells by whether its entry is in the journal.
    outcomes: tuple[Any, Any] = (False, True)
    # What it decided when it wrote, read afresh where ``outcomes[True]`` cannot say (a
    # recovery's count): given the retry's connection.
    landed: Callable[[Any], Any] | None = None
    call_id: str = ""  # given when it joins a batch (alone, ``alone`` makes its own)
    # Set where the write is exactly "journal this inline entry if this owner holds the run's
    # lease" (a step's outcome): a backend may make a batch's such writes in one statement.
    fenced: tuple[Entry, str] | None = None


class Pipelined(SQLBase):
    """``SQLBase`` with the pipeline's two verbs: queue a write, commit a batch."""

    _pipeline: GroupCommit[Write]
    # Whether the backend sends a batch whole (``_send_batch``), so that writes of several
    # statements offer a one-statement ``send`` of their own (PostgreSQL's dialect only).
    _sends_batches = False
    # Whether ``_as_writer`` does something (a backend keeping a connection for the pipeline).
    _own_writer = False
    # Whether a lone async caller commits its write itself (``GroupCommit``'s ``in_place``).
    _commits_in_place = False
    # Whether ``_append_together`` does something (see ``_decide``).
    _appends_together = False

    def _open_pipeline(self, after: Callable[[int], None] | None = None) -> None:
        """Called by a backend's constructor: this store object's one pipeline (``after``:
        see ``GroupCommit``)."""
        self._pipeline = GroupCommit(self._commit_batch, after, in_place=self._commits_in_place)

    def _batched(self, write: Write) -> Any:
        """Do ``write`` in the next transaction of the pipeline; return what it decided once
        that transaction committed."""
        return self._pipeline.submit(write)

    async def _batched_async(self, write: Write) -> Any:
        """``_batched`` for a caller on an event loop, which goes on while the write waits."""
        return await self._pipeline.submit_async(write)

    def _batched_all(self, writes: list[Write]) -> list[Any]:
        """Do ``writes`` together in the pipeline's next transaction (see
        ``GroupCommit.submit_all``); what each decided once it committed."""
        return self._pipeline.submit_all(writes)

    def _batched_each(self, writes: list[Write]) -> list[Any]:
        """``_batched_all``, with the error of each write that failed in its place."""
        return self._pipeline.submit_all(writes, raising=False)

    def _as_writer(self) -> AbstractContextManager[None]:
        """Around a batch's commit: the connection it uses is the pipeline's (a backend with
        a pool of connections keeps one for it)."""
        return nullcontext()

    def _commit_batch(self, batch: list[Pending[Write]]) -> None:
        if not self._own_writer:  # (a context manager that does nothing costs 4 calls)
            self._commit_in(batch)
            return
        with self._as_writer():
            self._commit_in(batch)

    def _commit_in(self, batch: list[Pending[Write]]) -> None:
        if len(batch) > 1:
            try:
                values = self._write_together([pending.write for pending in batch])
            except WouldWait as exc:  # led in place: nothing was written, a thread will
                for pending in batch:
                    pending.fail(exc)
                return
            except Exception:  # each write is then done alone, and reports its own error
                if NO_WAIT.get():  # (by a thread, not the event loop that led the batch)
                    refused = WouldWait("a batch led in place failed: done alone by a thread")
                    for pending in batch:
                        pending.fail(refused)
                    return
            else:
                for pending, value in zip(batch, values, strict=True):
                    pending.settle(value)
                return
        for pending in batch:
            try:
                pending.settle(pending.write.alone())
            except BaseException as exc:  # its caller raises it
                pending.fail(exc)

    def _write_together(self, writes: list[Write]) -> list[Any]:
        """Every write's ``work`` in one transaction; what each decided."""
        decided: list[Any] = []
        for write in writes:
            write.call_id = new_call_id()
        if self._sends_batches and all(write.send is not None for write in writes):
            return self._write_whole(writes)

        def attempt(conn: Any) -> list[Any]:
            if decided and self._committed(conn, writes, decided):
                return list(decided)  # the try before got as far as its commit, which landed
            decided[:] = self._decide(conn, writes)
            return list(decided)

        return self._write(attempt)

    def _write_whole(self, writes: list[Write]) -> list[Any]:
        """The batch's statements with its ``BEGIN`` and ``COMMIT``, in one round trip; what
        each write decided."""
        tried = False

        def attempt(conn: Any) -> list[Any]:
            nonlocal tried
            if tried:  # the try before may have committed: it did if any entry landed
                marked = [w.wrote(w.outcomes[True]) for w in writes]  # those that journal
                landed = [
                    mark and self._journaled(w.workflow_id, w.call_id)(conn)
                    for w, mark in zip(writes, marked, strict=True)
                ]
                if any(landed):  # those that journal nothing are idempotent: done again
                    return [
                        self._landed(conn, w, found) if mark else self._one(conn, w)
                        for w, mark, found in zip(writes, marked, landed, strict=True)
                    ]
            tried = True  # (a batch that landed with every write refused wrote nothing)
            sends = [functools.partial(self._one, write=write, sending=True) for write in writes]
            return self._send_batch(conn, sends)

        return self._run(attempt)

    @staticmethod
    def _landed(conn: Any, write: Write, found: bool) -> Any:
        """What ``write``, of a batch that committed unacknowledged, decided: ``found`` says
        whether its entry is in the journal."""
        if found and write.landed is not None:
            return write.landed(conn)
        return write.outcomes[found]

    def _send_batch(
        self, conn: Any, sends: Sequence[Callable[[Any], Callable[[], Any]]]
    ) -> list[Any]:
        """Where ``_sends_batches``: ``BEGIN``, each of ``sends``, ``COMMIT``, sent before any
        answer is read; what each answer decided (an error rolls back and raises)."""
        raise NotImplementedError

    def _send_prepared(self, conn: Any, name: str, params: dict[str, Any]) -> Callable[[], bool]:
        """Where ``_sends_batches``: send statement ``name``, prepared; what says, once it is
        answered, whether it changed one row."""
        raise NotImplementedError

    def _send_returning(
        self, conn: Any, name: str, params: dict[str, Any]
    ) -> Callable[[], tuple[Any, ...] | None]:
        """Where ``_sends_batches``: send statement ``name``, prepared; what reads, once it is
        answered, its one row (``None``: it returned none)."""
        raise NotImplementedError

    def _decide(self, conn: Any, writes: list[Write]) -> list[Any]:
        """What each write decided, inside the batch's transaction: the fenced appends first,
        in a few statements where the backend can (``_append_together``), then those that can
        be sent ahead, together (the writes of a batch are of different runs, or of one run's
        concurrent steps, so their order is free), then the others one by one."""
        values: dict[int, Any] = {}
        if self._appends_together:
            fenced = [i for i, write in enumerate(writes) if write.fenced is not None]
            if len(fenced) > 1 and self._append_together(conn, [writes[i] for i in fenced]):
                values = dict.fromkeys(fenced, True)
        ahead = [i for i, w in enumerate(writes) if w.send is not None and i not in values]
        if len(ahead) < 2:
            ahead = []
        with self._pipelined(conn) if ahead else nullcontext():
            answers = {i: self._one(conn, writes[i], sending=True) for i in ahead}
        values.update((i, answer()) for i, answer in answers.items())
        for i, write in enumerate(writes):
            if i not in values:
                values[i] = self._one(conn, write)
        return [values[i] for i in range(len(writes))]

    def _append_together(self, conn: Any, writes: list[Write]) -> bool:
        """Where ``_appends_together``: journal every one of ``writes`` (each ``fenced``),
        inside the batch's transaction, in a few statements; ``True`` if every lease held
        and all were written, else ``False`` having written none (each is then done alone)."""
        raise NotImplementedError

    def _committed(self, conn: Any, writes: list[Write], decided: list[Any]) -> bool:
        """Whether the batch that decided ``decided`` committed: it commits whole or not at
        all, so one write that wrote (and so journaled its footprint) tells."""
        for write, value in zip(writes, decided, strict=True):
            if write.wrote(value):
                return self._journaled(write.workflow_id, write.call_id)(conn)
        return False  # nothing was written: doing it again is the same

    @staticmethod
    def _one(conn: Any, write: Write, *, sending: bool = False) -> Any:
        token = CALL_ID.set(write.call_id)  # the entries it journals carry it
        try:
            if sending and write.send is not None:
                return write.send(conn)
            return write.work(conn)
        finally:
            CALL_ID.reset(token)
