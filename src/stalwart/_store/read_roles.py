"""The read roles of the store: what a reader may ask of it, none of it a write.

Each write role of ``base.py`` extends the read role of what it concerns (``RunStore`` extends
``RunReads``, ``JournalStore`` ``JournalReads``, ...), and ``ReadModelStore`` is every read
role: what the read models (``_views``) type their store as, so the type checker keeps them
from writing.
"""

from __future__ import annotations

from typing import Protocol

from .rows import (
    ApprovalRow,
    BreakerRow,
    CompensationRow,
    CountRow,
    IndexRow,
    JournalRow,
    QueueRow,
    ReplayState,
    RunRow,
    SpendRow,
    StatsRows,
    UsageRow,
    WorkerRow,
)

__all__ = [
    "ApprovalReads",
    "BreakerReads",
    "FleetReads",
    "JournalReads",
    "ReadModelStore",
    "RunReads",
]


class RunReads(Protocol):
    """Runs as rows, read: one, a page of them, and how many."""

    def get_run(self, workflow_id: str) -> RunRow | None:
        """The run, or ``None``."""

    def list_runs(
        self,
        *,
        status: str | None,
        name: str | None,
        limit: int,
        before: float | None,
        before_id: str | None = None,
        queue: str | None = None,
        since: float | None = None,
        parent_id: str | None = None,
    ) -> list[RunRow]:
        """Runs, newest first on ``(created_at, workflow_id)``, after ``(before, before_id)``;
        ``parent_id``: only the children of that run."""

    def count_runs(
        self,
        *,
        status: str | None,
        name: str | None,
        queue: str | None,
        since: float | None,
        parent_id: str | None = None,
    ) -> int:
        """How many runs match."""

    def run_counts(self) -> list[CountRow]:
        """How many runs each queue has in each status."""

    def queue_counts(self) -> list[CountRow]:
        """How many pending and running runs each queue has (no ended run is read)."""

    def run_queues(self) -> list[str]:
        """Every queue some run uses, whatever the run's status (one index probe a queue)."""


class JournalReads(Protocol):
    """A run's journal as a reader sees it: its rows, its size, the usage of its steps, a
    stored payload resolved, and the views replay and rollback read (the replay index, the
    compensation plan, a rollback in progress)."""

    def load_payload(self, stored: bytes) -> bytes:
        """Resolve a stored payload column (inline or reference) to the encoded payload."""

    def journal(
        self, workflow_id: str, *, after: int | None = None, limit: int | None = None
    ) -> list[JournalRow]:
        """Every journal row of a run (with ``after``: those whose id is over it; with
        ``limit``: at most that many), in order, payloads resolved."""

    def journal_size(self, workflow_id: str) -> int:
        """How many journal rows the run has."""

    def step_usage(self, workflow_id: str) -> list[UsageRow]:
        """What each step attempt of a run used, in order, without reading payloads; its
        ``in_doubt`` entries too."""

    def run_spend(self, workflow_id: str) -> SpendRow | None:
        """The run's running totals, kept as its journal grows (one row, whatever the
        journal's length); ``None`` for a run that has journaled no attempt yet."""

    def run_calls(self, workflow_id: str, name: str, input: bytes) -> int:
        """How many calls of step ``name`` with the stored input ``input`` (``column_of``)
        the run recorded, once ``count_calls`` counts them."""

    def replay_index(self, workflow_id: str) -> list[IndexRow]:
        """The positioned journal rows of a run, in order, without inputs."""

    def replay_state(self, workflow_id: str) -> ReplayState:
        """``replay_index`` and ``rollback_in_progress`` read together (one round trip): what
        executing a run reads first."""

    def compensation_plan(self, workflow_id: str) -> list[CompensationRow]:
        """Rows of compensable steps and compensations, in order, payloads resolved."""

    def rollback_in_progress(self, workflow_id: str) -> bytes | None:
        """What a started rollback will end as, unless a retry came after it."""


class ApprovalReads(Protocol):
    """Approval requests, read."""

    def get_approval(self, workflow_id: str, approval_id: str) -> ApprovalRow | None:
        """One approval request."""

    def list_approvals(self, *, pending: bool, workflow_id: str | None = None) -> list[ApprovalRow]:
        """Approval requests, oldest first."""

    def count_pending_approvals(self) -> int:
        """How many approval requests are undecided."""

    def approvals_of(self, workflow_ids: list[str]) -> list[ApprovalRow]:
        """Every approval request of these runs, in one read."""


class BreakerReads(Protocol):
    """The fleet's circuit breakers, read."""

    def breaker(self, name: str, *, now: float) -> BreakerRow | None:
        """Breaker ``name``; ``None`` when it never counted a failure (closed)."""

    def list_breakers(self, *, now: float) -> list[BreakerRow]:
        """Every breaker that has counted a failure, by name."""


class FleetReads(Protocol):
    """The queues apps declared and the workers serving the store, read."""

    def list_queues(self) -> list[QueueRow]:
        """Every declared queue, by name."""

    def list_workers(self, *, stale_before: float) -> list[WorkerRow]:
        """The workers seen since ``stale_before`` (older rows are dropped)."""

    def run_stats(self, *, since: float, width: float) -> StatsRows:
        """The overview of the runs since ``since``: runs created and ended per bucket of
        ``width`` seconds, step attempts and their latency by step, spend by workflow."""


class ReadModelStore(RunReads, JournalReads, ApprovalReads, BreakerReads, FleetReads, Protocol):
    """Every read role: what the read models may ask of the store."""
