"""Writes sent ahead on PostgreSQL: a lone write's whole transaction in one round trip, and a
batch of the write pipeline's in one (``send_batch``).

``BEGIN``, the write's statements and ``COMMIT`` go out together in pipeline mode and one
answer comes back, so a lone run's two transactions each wait for the server once, not once
a statement. The statements bind their values on the server and are prepared: a lone run
repeats the same few texts, which the server then neither parses nor plans again. Their
preconditions are statements that fail where they do not hold (a division by the zero rows
they changed: nothing else in them divides), so a failed one aborts the whole transaction and
says the write was refused; any other failure sends the write again the plain way, which reads
its preconditions from row counts (see ``SQLBase._once_ahead``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .pg_outages import connection_lost

__all__ = ["NotAhead", "Refused", "SentAhead", "send_ahead", "send_batch"]

T = TypeVar("T")


class Refused(Exception):
    """A write sent ahead found its precondition false: it was rolled back."""


class NotAhead(Exception):
    """A write sent ahead failed on another statement: it was rolled back and is to be done
    again the plain way."""


class _Prepared:
    """A connection whose ``execute`` binds parameters on the server and prepares the
    statement (no value is rendered into SQL here)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, query: str, params: dict[str, Any] | None = None) -> Any:
        import psycopg

        return psycopg.Cursor(self._conn).execute(query, params, prepare=True)


def send_ahead(conn: Any, send: Callable[[Any], T]) -> T:
    """``send``'s statements in one transaction, sent with its ``BEGIN`` and ``COMMIT`` and
    answered once; ``Refused`` when its precondition failed, ``NotAhead`` when another
    statement did. (The transaction is spelled out: psycopg's own waits for its ``BEGIN`` in
    pipeline mode.)"""
    import psycopg

    failed: psycopg.Error | None = None
    try:
        with conn.pipeline():  # its end sends what is queued and reads every answer
            try:
                conn.execute("BEGIN")
                value = send(_Prepared(conn))
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                # An answer read while statements were still being sent (a refusal that came
                # back fast) ends the block here, not through the pipeline's end, which would
                # meet the aborted pipeline and log a WARNING for a routine refusal.
                failed = exc
    except psycopg.Error as exc:
        failed = failed or exc
    if failed is not None:
        if connection_lost(failed):
            raise failed
        conn.execute("ROLLBACK")  # the failed statement left the transaction open
        if isinstance(failed, psycopg.errors.DivisionByZero):
            raise Refused from failed
        raise NotAhead from failed
    return value


def send_batch(conn: Any, sends: Sequence[Callable[[Any], Callable[[], T]]]) -> list[T]:
    """A batch of the write pipeline whole: ``BEGIN``, each of ``sends`` (which sends its
    statement and returns what reads its answer), ``COMMIT``, answered once. Each write's
    precondition is in its statement and read from its row count, so a refusal fails nothing;
    any error rolls the batch back and is raised (a lost connection's as it came)."""
    import psycopg

    failed: psycopg.Error | None = None
    answers: list[Callable[[], T]] = []
    try:
        with conn.pipeline():
            try:
                conn.execute("BEGIN")
                answers = [send(conn) for send in sends]
                conn.execute("COMMIT")
            except psycopg.Error as exc:  # an answer read early (see send_ahead)
                failed = exc
    except psycopg.Error as exc:
        failed = failed or exc
    if failed is not None:
        if not connection_lost(failed):
            conn.execute("ROLLBACK")  # (a COMMIT that failed ended it: then a no-op)
        raise failed
    return [answer() for answer in answers]


class SentAhead:
    """A PostgreSQL store's statements sent before their answers are read: a batch's writes
    whole (``send_batch``), prepared statements and their row counts or rows read later, and
    transactions spelled out with ``BEGIN`` and ``COMMIT`` sent among their statements."""

    _q: dict[str, str]

    _sends_batches = True

    def _send_prepared(self, conn: Any, name: str, params: dict[str, Any]) -> Callable[[], bool]:
        import psycopg

        cur = psycopg.Cursor(conn)
        cur.execute(self._q[name], params, prepare=True)
        return lambda: bool(cur.rowcount == 1)

    _spells_transactions = True

    def _spelled_out(self, conn: Any, work: Callable[[Any], T]) -> T:
        from psycopg.pq import TransactionStatus

        try:
            return work(conn)
        except BaseException:
            if not conn.broken and conn.info.transaction_status in (
                TransactionStatus.INTRANS,
                TransactionStatus.INERROR,
            ):
                conn.execute("ROLLBACK")  # the failed statement left the transaction open
            raise

    def _send_rows(
        self, conn: Any, name: str, params: dict[str, Any]
    ) -> Callable[[], list[Any] | None]:
        import psycopg

        cur = conn.execute(self._q[name], params)

        def rows() -> list[Any] | None:
            try:
                return cur.fetchall()  # type: ignore[no-any-return]
            except psycopg.Error:  # never answered: the transaction's answer was lost
                return None

        return rows

    def _send_returning(
        self, conn: Any, name: str, params: dict[str, Any]
    ) -> Callable[[], tuple[Any, ...] | None]:
        import psycopg

        cur = psycopg.Cursor(conn)
        cur.execute(self._q[name], params, prepare=True)
        return cur.fetchone

    def _send_batch(self, conn: Any, sends: Sequence[Callable[[Any], Callable[[], T]]]) -> list[T]:
        return send_batch(conn, sends)

    def _pipelined(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        # A batch's appends go out together: one round trip for all, not one each.
        return conn.pipeline()  # type: ignore[no-any-return]
