"""PostgreSQL reads a journal's payload trees in two statements, whatever their depth: the
first level by key, then everything below it in one recursive query, each binding its keys
and answering its pieces in binary."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PayloadTrees"]


class PayloadTrees:
    """The payload reads of ``PostgresStore`` (``PayloadColumns``' hooks)."""

    _q: dict[str, str]

    def _fetch_found(self, conn: Any, digests: list[bytes]) -> dict[bytes, bytes]:
        # One round trip for all of a payload tree's level, not one per piece.
        return self._payload_rows(conn, "get_payloads", digests)

    def _rows_below(
        self, conn: Any, digests: list[bytes], leaves: set[bytes]
    ) -> dict[bytes, bytes]:
        # The trees below them in one round trip, not one per level.
        from psycopg.pq import TransactionStatus

        params = {"leaves": list(leaves)}
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return self._payload_rows(conn, "payloads_below", digests, params)
        # Alone, in a transaction of its own without JIT, sent whole: the planner prices a
        # recursive query at ten times its step, so a long journal's passes jit_above_cost
        # (1,147 keys: 159,000) and compiled for 50 ms a query that runs in 20.
        with conn.pipeline(), conn.transaction():
            conn.execute(self._q["no_jit"])
            return self._payload_rows(conn, "payloads_below", digests, params)

    def _payload_rows(
        self, conn: Any, query: str, digests: list[bytes], more: dict[str, Any] | None = None
    ) -> dict[bytes, bytes]:
        import psycopg

        # A cursor binding its parameters on the server, so the pieces come back as binary
        # bytea (the connection's client-side cursors read them as hex text, twice the bytes);
        # never prepared, as the client-side ones never are (a pooler may not keep them).
        # The keys go as binary arrays too (as text, each is escaped by a regex).
        sql = re.sub(r"%\((digests|leaves)\)s", r"%(\1)b", self._q[query])
        params = {"digests": list(set(digests)), **(more or {})}
        with psycopg.Cursor(conn) as cur:
            rows = cur.execute(sql, params, prepare=False, binary=True).fetchall()
        return {bytes(digest): bytes(data) for digest, data in rows}
