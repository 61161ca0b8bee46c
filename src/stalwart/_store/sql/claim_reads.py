"""Finding the runs to claim: whether one is claimable, the best candidates, the runs held by
a host's processes, and when the next timer or queue start falls due."""

from __future__ import annotations

from ..base import QueueLimits, RunRow
from .pipeline import Pipelined

__all__ = ["ClaimReads"]


class ClaimReads(Pipelined):
    """The reads of the ``LeaseStore`` role that find claimable runs (``LeaseVerbs`` takes
    them)."""

    def claimable(self, workflow_id: str, *, now: float, holder_gone: bool = False) -> bool:
        """Whether a worker may take the run now (the ``claimable`` fragment)."""
        params = {"workflow_id": workflow_id, "now": now, "holder_gone": int(holder_gone)}
        return bool(self._rows("claimable", params))

    def claim_candidates(
        self, *, names: list[str], queues: list[str], now: float, limit: int
    ) -> list[RunRow]:
        """Claimable runs of these workflows and queues, best first, each its whole row."""
        params = {
            "names": self._list(names),
            "queues": self._list(queues),
            "now": now,
            "limit": limit,
            "holder_gone": 0,  # a worker finds dead holders of its host with held_on_host
        }
        return self._records("claim_candidates", params, RunRow)

    def held_on_host(self, *, host_prefix: str, names: list[str]) -> list[RunRow]:
        """Running runs whose lease holder names this host, each its whole row."""
        params = {"host_prefix": host_prefix + "%", "names": self._list(names)}
        return self._records("held_on_host", params, RunRow)

    def next_wake(self, *, names: list[str], queues: list[str]) -> float | None:
        """The earliest time a suspended run of these workflows becomes claimable."""
        params = {"names": self._list(names), "queues": self._list(queues)}
        rows = self._rows("next_wake", params)
        return rows[0][0] if rows else None

    def next_start(self, queue: str, limits: QueueLimits) -> float | None:
        """When the queue's rate next lets a run start (``None``: it has no rate)."""
        if limits.rate is None:
            return None
        rows = self._rows("nth_latest_start", {"queue": queue, "offset": limits.rate - 1})
        return None if not rows else float(rows[0][0]) + limits.period

    def cancel_requested_for(self, owner_prefix: str) -> set[str]:
        """The runs held by owners starting with ``owner_prefix`` that were asked to cancel."""
        params = {"owner_prefix": owner_prefix}
        return {row[0] for row in self._rows("cancel_requested_for", params)}
