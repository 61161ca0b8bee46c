"""Writes sent ahead on PostgreSQL: a lone write's whole transaction in one round trip.

``BEGIN``, the write's statements and ``COMMIT`` go out together in pipeline mode and one
answer comes back, so a lone run's two transactions each wait for the server once, not once
a statement. The statements bind their values on the server and are prepared: a lone run
repeats the same few texts, which the server then neither parses nor plans again. Their
preconditions are statements that fail where they do not hold, so a failure aborts the whole
transaction; the caller then does the write the plain way, which reads what failed from row
counts (see ``SQLBase._once_ahead``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .pg_outages import connection_lost

__all__ = ["NotAhead", "send_ahead"]

T = TypeVar("T")


class NotAhead(Exception):
    """A write sent ahead failed on a statement (a precondition that did not hold): it was
    rolled back and is to be done again the plain way."""


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
    answered once; ``NotAhead`` when one failed. (The transaction is spelled out: psycopg's
    own waits for its ``BEGIN`` in pipeline mode.)"""
    import psycopg

    try:
        with conn.pipeline():  # its end sends what is queued and reads every answer
            conn.execute("BEGIN")
            value = send(_Prepared(conn))
            conn.execute("COMMIT")
    except psycopg.Error as exc:
        if connection_lost(exc):
            raise
        conn.execute("ROLLBACK")  # the failed statement left the transaction open
        raise NotAhead from exc
    return value
