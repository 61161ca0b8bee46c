"""The ingress role of the store: the fleet-wide counts of what each subscription (a broker's
queue, stream or subject, or a webhook) accepted and rejected.

Each worker adds to a subscription's counts after the message's run or event is committed
(``count_ingress``, an upsert that also creates the row, so a subscription is listed once a
worker served it); the listings read them (``list_ingress``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["IngressRow", "IngressStore"]


@dataclass(frozen=True, slots=True)
class IngressRow:
    """A subscription as the store counts it."""

    name: str
    kind: str  # "rabbitmq", "nats", "redis", "webhook"
    target: str  # what a message does: "starts agent", "event 'paid'"
    accepted: int
    rejected: int
    updated_at: float


class IngressStore(Protocol):
    """Counts of messages accepted and rejected per subscription, fleet-wide."""

    def count_ingress(
        self, name: str, *, kind: str, target: str, accepted: int, rejected: int, now: float
    ) -> None:
        """Add ``accepted`` and ``rejected`` to the counts of subscription ``name`` (its row
        created with zero counts first if it has none; ``kind`` and ``target`` replaced)."""

    def list_ingress(self) -> list[IngressRow]:
        """Every subscription counted, by name."""
