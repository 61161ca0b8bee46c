"""What every SQL verb stands on: the hooks a backend provides (connections, transactions,
retries, its dialect's query text), the once-only retry of a write, typed rows, and journal
entries (payload columns: ``payload_columns``)."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar, cast

from ..base import Entry, IndexRow, ReplayState
from ..payloads import INLINE_LIMIT
from ..queries import has_optional, specialize
from ..sealed import seal_error
from .call_ids import new_call_id
from .migrating import Migrating
from .payload_columns import PayloadColumns

__all__ = ["SQLBase"]

T = TypeVar("T")
R = TypeVar("R")


# The id of the store call under way in this thread (``_once``), stamped on the journal entries
# it writes, so a retry after a lost acknowledgement can tell whether the first try landed.
# The store keeps it here, never in the caller's Entry.
CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stalwart_call_id", default=None
)


# The journal's columns an appended entry sets, in the order of ``_entry_params``.
ENTRY_COLUMNS = (
    "workflow_id",
    "seq",
    "position",
    "kind",
    "name",
    "status",
    "attempt",
    "started_at",
    "finished_at",
    "input",
    "output",
    "error",
    "by",
    "compensable",
    "call_id",
    "usage",
)


class _Fenced(Exception):
    """Rolls back a multi-entry append whose lease was lost midway."""


def _inline(entry: Entry) -> bool:
    """Whether ``entry``'s payloads stay in its row (so appending it is one statement)."""
    return (entry.input is None or len(entry.input) <= INLINE_LIMIT) and (
        entry.output is None or len(entry.output) <= INLINE_LIMIT
    )


@functools.cache
def _field_names(row_type: Any) -> tuple[str, ...]:
    if not dataclasses.is_dataclass(row_type):
        return ()
    return tuple(f.name for f in dataclasses.fields(row_type) if f.init)


def _typed(cur: Any, row_type: Callable[..., R]) -> list[R]:
    """The rows of an executed cursor as ``row_type``, built by column name: the order of a
    query's ``SELECT`` list does not matter, only its column names (a list in the fields' own
    order is passed positionally, a third of the cost a row)."""
    return _built(tuple(column[0] for column in cur.description), cur.fetchall(), row_type)


def _built(
    names: tuple[str, ...], rows: Iterable[Sequence[Any]], row_type: Callable[..., R]
) -> list[R]:
    """``rows`` of columns ``names`` as ``row_type`` (see ``_typed``)."""
    if names == _field_names(row_type):
        return [row_type(*row) for row in rows]
    return [row_type(**dict(zip(names, row, strict=True))) for row in rows]


class SQLBase(PayloadColumns, Migrating):
    """The plumbing of a SQL store; the verbs live in mixins over it."""

    url: str
    durable: bool
    _q: dict[str, str]

    # -- what a backend provides ----------------------------------------------------------

    def _write(self, work: Callable[[Any], T]) -> T:
        """Run ``work(conn)`` in one write transaction, retried while the store is busy."""
        raise NotImplementedError

    def _run(self, work: Callable[[Any], T]) -> T:
        """Run ``work(conn)`` outside an explicit transaction (each statement commits)."""
        raise NotImplementedError

    def _list(self, values: list[str]) -> Any:
        """A list parameter as the dialect's ``IN`` clause takes it."""
        raise NotImplementedError

    def _lock_run(self, conn: Any, workflow_id: str, *, skip_locked: bool = False) -> bool:
        """Inside ``_write``: serialize writers of one run (a no-op where writers are serial).

        With ``skip_locked``, a run another writer holds is not waited for: ``False``."""
        return True

    def _send_lock_run(self, conn: Any, workflow_id: str, *, skip_locked: bool = False) -> None:
        """``_lock_run``, its answer not read: inside ``_pipelined``, it goes out with the
        statements after it (with ``skip_locked``, whether it locked is theirs to tell)."""
        self._lock_run(conn, workflow_id, skip_locked=skip_locked)

    def _pipelined(self, conn: Any) -> AbstractContextManager[Any]:
        """Around statements sent without waiting for their answers (where the backend can):
        at its end every one was answered; read their cursors after it."""
        return nullcontext()

    def _lock_queue(self, conn: Any, queue: str) -> None:
        """Inside ``_write``: serialize the starts of one queue's runs."""

    def _insert_entry(self, conn: Any, name: str, params: dict[str, Any]) -> bool:
        """Run an append query; backends may prepare the hot one."""
        return bool(conn.execute(self._q[name], params).rowcount == 1)

    def _send_entry(self, conn: Any, name: str, params: dict[str, Any]) -> Callable[[], bool]:
        """Send an append query; what says, once it is answered, whether it wrote its row
        (a backend that cannot send ahead runs it now)."""
        wrote = self._insert_entry(conn, name, params)
        return lambda: wrote

    def close(self) -> None:
        """Release connections."""
        raise NotImplementedError

    def reserve_connections(self, threads: int) -> None:
        """Make room for ``threads`` threads using the store at once (where that matters)."""

    def release_memory(self) -> None:
        """Free what the store's connections cache and can read again (where that matters)."""

    def clock_offset(self) -> float | None:
        """How far the store's clock is ahead of this machine's."""
        raise NotImplementedError

    def data_version(self) -> int:
        """Changes whenever another connection commits (a cheap change detector)."""
        raise NotImplementedError

    def _replay_of(self, rows: Sequence[Sequence[Any]]) -> ReplayState:
        """The ``ReplayState`` the rows of query ``replay_state`` say."""
        index = [IndexRow(*row) for row in rows if row[0] is not None]  # its columns in order
        # The one row without a seq, if any: the last rolling_back or retry marker.
        marker = next((row for row in rows if row[0] is None), None)
        if marker is None or marker[3] != "rolling_back" or marker[6] is None:
            return ReplayState(index, None)
        return ReplayState(index, self.load_payload(bytes(marker[6])))

    # Whether a transaction may be spelled out (``BEGIN`` and ``COMMIT`` as statements sent
    # with the others, on a connection outside ``_write``): see ``_spelled_out``.
    _spells_transactions = False

    def _spelled_out(self, conn: Any, work: Callable[[Any], T]) -> T:
        """``work``, which sends its own ``BEGIN`` and ``COMMIT``, on ``conn`` (outside any
        transaction); an error rolls the transaction back and is raised. Only where
        ``_spells_transactions``."""
        raise NotImplementedError

    def _send_rows(
        self, conn: Any, name: str, params: dict[str, Any]
    ) -> Callable[[], list[Any] | None]:
        """Inside a transaction sent ahead (``_once_ahead``'s ``send``): send query ``name``;
        what reads its rows once the transaction was answered (``None``: its answer never
        came, the transaction's having been lost). Only where the backend sends ahead."""
        raise NotImplementedError

    # -- running queries ------------------------------------------------------------------

    def _once(
        self,
        workflow_id: str | None,
        footprint: Entry | None,
        work: Callable[[Any], T],
        *,
        transaction: bool = True,
        landed: Callable[[Any], bool] | None = None,
    ) -> T:
        """Run ``work`` once even when it is retried after a lost connection.

        A commit can land and its acknowledgement be lost. ``footprint`` is the journal entry
        ``work`` writes, which carries an id of this call (``CALL_ID``); a retry whose first try may
        have committed (it got as far as the commit, or was one autocommitted statement)
        looks for that entry first and, when it is there, returns what the first try decided
        (for a lone statement: that it landed) instead of doing it again. A write that
        journals nothing passes ``landed`` instead: whether the write this call made is
        there (found by an id of its own)."""
        call_id = None if footprint is None else new_call_id()  # this call's
        if call_id is not None:
            landed = self._journaled(workflow_id, call_id)
        decided: list[T] = []
        tried = False

        def attempt(conn: Any) -> T:
            nonlocal tried
            if landed is not None and (decided or (tried and not transaction)) and landed(conn):
                return decided[0] if decided else cast(T, True)
            tried = True
            decided[:] = [work(conn)]
            return decided[0]

        token = CALL_ID.set(call_id)  # every entry this call journals carries it
        try:
            return self._write(attempt) if transaction else self._run(attempt)
        finally:
            CALL_ID.reset(token)

    def _once_ahead(
        self,
        workflow_id: str,
        footprint: Entry,
        work: Callable[[Any], T],
        send: Callable[[Any], T],
        refused: T,
    ) -> T:
        """``_once(work)``, or, where the backend can send a transaction's statements before
        their answers come back, ``send``: the same write as ``work``, whose precondition is
        a statement that fails where it does not hold, so the whole transaction (its
        ``COMMIT`` included) goes out at once. ``send`` returns what ``work`` returns when it
        writes, ``refused`` what it returns when the precondition does not hold. A backend
        that cannot send ahead runs ``work``."""
        return self._once(workflow_id, footprint, work)

    def _journaled(self, workflow_id: str | None, call_id: str) -> Callable[[Any], bool]:
        """Whether the entry of call ``call_id`` is in ``workflow_id``'s journal."""

        def found(conn: Any) -> bool:
            params = {"workflow_id": workflow_id, "call_id": call_id}
            return conn.execute(self._q["entry_exists"], params).fetchone() is not None

        return found

    def _sql(self, name: str, params: dict[str, Any]) -> str:
        """The text of query ``name`` as run with ``params``: its optional conditions resolved
        (see :func:`~stalwart._store.queries.specialize`), so its plan can use the index of
        each filter given."""
        query = self._q[name]
        if not has_optional(query):
            return query
        return specialize(query, frozenset(key for key, value in params.items() if value is None))

    def _rows(self, name: str, params: dict[str, Any]) -> list[Any]:
        """The rows of query ``name``, positionally (for scalars and private reads)."""
        query = self._sql(name, params)
        return self._run(lambda conn: list(conn.execute(query, params).fetchall()))

    def _records(self, name: str, params: dict[str, Any], row_type: Callable[..., R]) -> list[R]:
        """The rows of query ``name`` as ``row_type``, by column name."""
        query = self._sql(name, params)
        return self._run(lambda conn: _typed(conn.execute(query, params), row_type))

    def _changes(self, name: str, params: dict[str, Any]) -> int:
        """How many rows statement ``name`` changed."""
        query = self._sql(name, params)
        return self._run(lambda conn: int(conn.execute(query, params).rowcount))

    # -- journal entries -------------------------------------------------------------------

    def _entry_params(
        self, conn: Any, workflow_id: str, entry: Entry, owner: str | None
    ) -> dict[str, Any]:
        """``entry``'s journal row for ``workflow_id``, named: ``ENTRY_COLUMNS`` in order, then
        the lease's ``owner`` (its payloads stashed where they are too big for the row)."""
        stash = self._stash
        given, output = entry.input, entry.output
        return {
            "workflow_id": workflow_id,
            "seq": entry.seq,
            "position": entry.position,
            "kind": str(entry.kind),  # plain str: sqlite3 binds str subclasses slowly
            "name": entry.name,
            "status": str(entry.status),
            "attempt": entry.attempt,
            "started_at": entry.started_at,
            "finished_at": entry.finished_at,
            # inline payloads (the common ones) skip the call
            "input": given
            if given is None or len(given) <= INLINE_LIMIT
            else stash(conn, given, run=workflow_id if entry.kind == "step" else None),
            "output": output
            if output is None or len(output) <= INLINE_LIMIT
            else stash(conn, output, tree=entry.kind == "run"),
            "error": None if entry.error is None else self._error_text(entry.error.to_json()),
            "by": entry.by,
            "compensable": int(entry.compensable),
            "call_id": CALL_ID.get(),
            "usage": None if entry.usage is None else entry.usage.to_json(entry.model),
            "owner": owner,
        }

    def _error_text(self, text: str | None) -> str | None:
        """An error record as stored (its message sealed in an encrypted store)."""
        return text if text is None or self.keyring is None else seal_error(self.keyring, text)

    def _wake_parent(self, conn: Any, workflow_id: str, now: float) -> None:
        """Inside the transaction that ends a run: wake its parent if it waits on it."""
        key = {"workflow_id": workflow_id, "now": now, "waiting_for": f"child:{workflow_id}"}
        conn.execute(self._q["wake_parent"], key)

    def _journal_in(self, conn: Any, workflow_id: str, entry: Entry) -> None:
        """Inside a transaction that already decided: journal ``entry`` unfenced."""
        conn.execute(self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None))
