"""The ingress role of the store: the fleet-wide counts of what each subscription (a broker's
queue, stream or subject, or a webhook) accepted and rejected.

A message's run or event is counted as accepted in the transaction that writes it
(``create_run`` or ``deliver_event`` with an :class:`IngressCount`); a rejection, which writes
nothing else, is counted alone (``count_ingress``, an upsert that also creates the row, so a
subscription is listed once a worker served it). The listings read them (``list_ingress``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["IngressCount", "IngressRow", "IngressStore"]


@dataclass(frozen=True, slots=True)
class IngressRow:
    """A subscription as the store counts it."""

    name: str
    kind: str  # "rabbitmq", "nats", "redis", "webhook"
    target: str  # what a message does: "starts agent", "event 'paid'"
    accepted: int
    rejected: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class IngressCount:
    """The subscription a write counts as accepted: ``create_run`` and ``deliver_event`` given
    one add one to its accepted count in their own transaction, so a crash never separates a
    message's run or event from its count."""

    name: str
    kind: str
    target: str


class IngressStore(Protocol):
    """Counts of messages accepted and rejected per subscription, fleet-wide."""

    def count_ingress(
        self, name: str, *, kind: str, target: str, accepted: int, rejected: int, now: float
    ) -> None:
        """Add ``accepted`` and ``rejected`` to the counts of subscription ``name`` (its row
        created with zero counts first if it has none; ``kind`` and ``target`` replaced)."""

    def list_ingress(self) -> list[IngressRow]:
        """Every subscription counted, by name."""
