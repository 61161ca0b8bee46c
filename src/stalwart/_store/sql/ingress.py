"""Ingress counts over SQL: one upsert adds to a subscription's counts (alone, or in the
transaction of the run or event a message wrote), one read lists them."""

from __future__ import annotations

from typing import Any

from ..ingress import IngressCount, IngressRow
from ._base import SQLBase

__all__ = ["IngressVerbs", "count_accepted"]


def _add(
    name: str, kind: str, target: str, *, accepted: int, rejected: int, now: float
) -> dict[str, Any]:
    """The parameters of the ``count_ingress`` upsert."""
    return {
        "name": name,
        "kind": kind,
        "target": target,
        "accepted": accepted,
        "rejected": rejected,
        "now": now,
    }


def count_accepted(conn: Any, query: str, count: IngressCount, now: float) -> None:
    """In the caller's transaction: one more message accepted by ``count``'s subscription
    (``query``: the ``count_ingress`` statement)."""
    conn.execute(query, _add(count.name, count.kind, count.target, accepted=1, rejected=0, now=now))


class IngressVerbs(SQLBase):
    """The ``IngressStore`` verbs over SQL."""

    def count_ingress(
        self, name: str, *, kind: str, target: str, accepted: int, rejected: int, now: float
    ) -> None:
        """Add to the counts of subscription ``name``, creating its row when missing."""
        params = _add(name, kind, target, accepted=accepted, rejected=rejected, now=now)
        self._write(lambda conn: conn.execute(self._q["count_ingress"], params))

    def list_ingress(self) -> list[IngressRow]:
        """Every subscription counted, by name."""
        return self._records("list_ingress", {}, IngressRow)
