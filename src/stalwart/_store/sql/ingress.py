"""Ingress counts over SQL: one upsert adds to a subscription's counts, one read lists them."""

from __future__ import annotations

from ..ingress import IngressRow
from ._base import SQLBase

__all__ = ["IngressVerbs"]


class IngressVerbs(SQLBase):
    """The ``IngressStore`` verbs over SQL."""

    def count_ingress(
        self, name: str, *, kind: str, target: str, accepted: int, rejected: int, now: float
    ) -> None:
        """Add to the counts of subscription ``name``, creating its row when missing."""
        params = {
            "name": name,
            "kind": kind,
            "target": target,
            "accepted": accepted,
            "rejected": rejected,
            "now": now,
        }
        self._write(lambda conn: conn.execute(self._q["count_ingress"], params))

    def list_ingress(self) -> list[IngressRow]:
        """Every subscription counted, by name."""
        return self._records("list_ingress", {}, IngressRow)
