"""The store contract: atomic verbs over runs, their journal and payloads.

Every verb is one transaction. Verbs that change a run the caller executes carry the caller's
lease ``owner`` and do nothing (returning ``False``) when the caller no longer holds the lease,
so a worker that lost its lease can never overwrite the new holder's records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ApprovalRow", "Entry", "IndexRow", "JournalRow", "QueueLimits", "RunRow", "Store"]

# The schema version this code writes; a store records the oldest code version it serves.
SCHEMA_VERSION = 7


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's declared limits, applied by every worker of the app."""

    concurrency: int | None = None
    rate: int | None = None
    period: float = 1.0


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run as stored."""

    workflow_id: str
    name: str
    status: str
    queue: str
    priority: int
    input: bytes | None
    output: bytes | None
    error: str | None
    created_at: float
    updated_at: float
    lease_owner: str | None
    lease_expires_at: float | None
    wake_at: float | None = None
    waiting_for: str | None = None
    deadline: float | None = None
    cancel_requested: int = 0
    retrying: str | None = None  # "seq:attempt" of the last retry that began


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """An approval request as stored."""

    workflow_id: str
    approval_id: str
    subject: str
    details: bytes | None
    requested_at: float
    expires_at: float | None
    decided_at: float | None
    approved: int | None
    by: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One journal row as replay needs it: no inputs, outputs still as stored references."""

    seq: int
    position: str
    kind: str
    name: str
    status: str
    attempt: int | None
    output: bytes | None
    error: str | None
    input: bytes | None = None  # only for scheduled waits: what they wait for


@dataclass(frozen=True, slots=True)
class JournalRow:
    """One journal row for the audit trail, payloads resolved to their encoded bytes."""

    id: int
    seq: int | None
    kind: str
    name: str
    status: str
    attempt: int | None
    started_at: float | None
    finished_at: float | None
    input: bytes | None
    output: bytes | None
    error: str | None
    by: str | None
    position: str | None = None


@dataclass(slots=True)
class Entry:
    """A journal entry to append. ``input``/``output`` are encoded payloads."""

    kind: str
    name: str
    status: str
    seq: int | None = None
    position: str | None = None
    attempt: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    input: bytes | None = None
    output: bytes | None = None
    error: str | None = None
    by: str | None = None
    compensable: bool = False
    call_id: str | None = None  # set by the store: which call wrote it, for safe retries


class Store(Protocol):
    """What the engine needs from a backend."""

    url: str
    durable: bool

    def close(self) -> None:
        """Release connections."""

    def reserve_connections(self, threads: int) -> None:
        """Make room for ``threads`` threads using the store at once (where that matters)."""

    def create_run(
        self,
        *,
        workflow_id: str,
        name: str,
        status: str,
        queue: str,
        priority: int,
        input: bytes,
        now: float,
        owner: str | None,
        lease_until: float | None,
        entry: Entry,
        deadline: float | None = None,
    ) -> bool:
        """Insert a run (and its first journal entry); ``False`` if the id exists."""

    def get_run(self, workflow_id: str) -> RunRow | None:
        """The run, or ``None``."""

    def take_lease(
        self,
        workflow_id: str,
        *,
        owner: str,
        expected_owner: str | None,
        now: float,
        lease_until: float,
        entry: Entry | None = None,
        recovery: bool = False,
        holder_gone: bool = False,
        limits: QueueLimits | None = None,
    ) -> tuple[bool, int]:
        """Take the lease of a pending or running run whose owner is still ``expected_owner``.

        With ``limits``, a pending or suspended run starts only within its queue's limits.

        Returns whether it was taken and, for a ``recovery``, how many recoveries in a row
        have found the run with no more completed journal entries than the last one did (1
        when it made progress since); 0 otherwise.
        """

    def renew_lease(self, workflow_id: str, *, owner: str, lease_until: float) -> bool | None:
        """Extend a held lease: ``None`` if it was lost, else whether cancel was requested."""

    def record_progress(
        self,
        workflow_id: str,
        *,
        owner: str,
        progress: bytes | None,
        now: float,
        lease_until: float,
    ) -> bool:
        """Store a step's heartbeat details and extend the lease."""

    def release_lease(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give up a held lease, leaving the run's status as it is."""

    def mark_retry(self, workflow_id: str, *, owner: str, marker: str) -> bool:
        """Note on a held run that a step's retry began (``seq:attempt``)."""

    def append(self, workflow_id: str, entry: Entry, *, owner: str | None) -> bool:
        """Append a journal entry; with ``owner``, only while that owner holds the lease."""

    def finish_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Set a terminal (or attention) status, release the lease and journal it."""

    def replay_index(self, workflow_id: str) -> list[IndexRow]:
        """The positioned journal rows of a run, in order, without inputs."""

    def load_payload(self, stored: bytes) -> bytes:
        """Resolve a stored payload column (inline or reference) to the encoded payload."""

    def journal(self, workflow_id: str) -> list[JournalRow]:
        """Every journal row of a run, in order, payloads resolved."""

    def list_runs(
        self, *, status: str | None, name: str | None, limit: int, before: float | None
    ) -> list[RunRow]:
        """Runs, newest first."""

    # -- workers and waits ------------------------------------------------------------------

    def claim_candidates(
        self, *, names: list[str], queues: list[str], now: float, limit: int
    ) -> list[tuple[str, str, str | None]]:
        """``(workflow_id, status, lease_owner)`` of claimable runs, best first."""

    def held_on_host(self, *, host_prefix: str, names: list[str]) -> list[tuple[str, str]]:
        """``(workflow_id, lease_owner)`` of running runs held by processes of this host."""

    def next_wake(self, *, names: list[str], queues: list[str]) -> float | None:
        """The earliest ``wake_at`` of a suspended run."""

    def next_start(self, queue: str, limits: QueueLimits) -> float | None:
        """When the queue's rate next lets a run start (``None``: it has no rate)."""

    def data_version(self) -> int:
        """Changes whenever another connection commits (a cheap change detector)."""

    def suspend_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        wake_at: float | None,
        waiting_for: str | None,
        now: float,
        entry: Entry | None = None,
    ) -> bool:
        """Suspend and release the lease, unless what the run waits for already arrived."""

    def open_wait(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str,
        approval: dict[str, Any] | None = None,
    ) -> bool:
        """Journal a wait as scheduled, with its approval request if any."""

    def resolve_wait(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str,
        event_name: str | None = None,
        approval_id: str | None = None,
        time_out: bool = False,
        now: float = 0.0,
        encode_decision: Callable[[ApprovalRow], bytes] | None = None,
        until: float | None = None,
    ) -> tuple[str, bytes | None]:
        """Decide a wait in one transaction: event, then decision, then timer."""

    def deliver_event(
        self,
        workflow_id: str,
        *,
        name: str,
        payload: bytes | None,
        dedup_key: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Store an event and wake its run; ``False`` for a repeated ``dedup_key``."""

    def get_approval(self, workflow_id: str, approval_id: str) -> ApprovalRow | None:
        """One approval request."""

    def list_approvals(self, *, pending: bool, workflow_id: str | None = None) -> list[ApprovalRow]:
        """Approval requests, oldest first."""

    def decide_approval(
        self,
        workflow_id: str,
        approval_id: str,
        *,
        approved: bool,
        by: str,
        reason: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Store a decision and wake the run; ``False`` if it was decided already."""

    def cancel_run(self, workflow_id: str, *, now: float, error: str, entry: Entry) -> str:
        """``"cancelled"`` at once, ``"requested"`` from its holder, or ``"finished"``."""

    def cancel_requested_for(self, owner_prefix: str) -> set[str]:
        """Runs held by owners starting with ``owner_prefix`` that were asked to cancel."""

    def redrive(self, workflow_id: str, *, now: float, entries: list[Entry]) -> bool:
        """Make a failed or needs_attention run pending again and journal ``entries``."""

    def compensation_plan(self, workflow_id: str) -> list[tuple[Any, ...]]:
        """Rows of compensable steps and compensations, in order, payloads resolved."""

    def append_many(self, workflow_id: str, entries: list[Entry], *, owner: str) -> bool:
        """Append several entries in one transaction, fenced by the lease."""

    def fork_candidates(self, workflow_id: str) -> list[tuple[Any, ...]]:
        """``(id, seq, position, kind, name, status, compensable)`` of positioned rows."""

    def fork_run(
        self,
        source: str,
        *,
        new_id: str,
        name: str,
        queue: str,
        input: bytes | None,
        now: float,
        reuse: list[int],
        started: Entry,
        by: str,
        notes: Entry,
    ) -> bool:
        """Create a run whose journal reuses rows of ``source``."""

    def rollback_in_progress(self, workflow_id: str) -> bytes | None:
        """What a started rollback will end as, unless a retry came after it."""

    def release_run(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give a held run back as ``pending`` (a graceful stop, not a recovery)."""
