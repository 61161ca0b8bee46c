"""Public value types and the vocabulary of statuses and journal kinds."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TERMINAL",
    "Approval",
    "ApprovalRequest",
    "JournalEntry",
    "WorkflowInfo",
    "from_epoch",
    "to_epoch",
]

PENDING, RUNNING, SUSPENDED = "pending", "running", "suspended"
COMPLETED, FAILED, CANCELLED, NEEDS_ATTENTION = (
    "completed",
    "failed",
    "cancelled",
    "needs_attention",
)
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
STATUSES = (PENDING, RUNNING, SUSPENDED, COMPLETED, FAILED, CANCELLED, NEEDS_ATTENTION)


def from_epoch(seconds: float | None) -> _dt.datetime | None:
    """A UTC datetime for epoch ``seconds``."""
    return None if seconds is None else _dt.datetime.fromtimestamp(seconds, _dt.UTC)


def to_epoch(when: _dt.datetime | float) -> float:
    """Epoch seconds for a datetime (naive ones are taken as UTC) or a number."""
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.UTC)
        return when.timestamp()
    return float(when)


@dataclass(frozen=True)
class WorkflowInfo:
    """A run as listed by ``app.list_workflows``."""

    workflow_id: str
    name: str
    status: str
    queue: str
    created_at: _dt.datetime
    updated_at: _dt.datetime
    error: str | None


@dataclass(frozen=True)
class JournalEntry:
    """One entry of a run's audit trail (see ``app.journal``)."""

    seq: int | None
    kind: str
    name: str
    status: str
    attempt: int | None
    started_at: _dt.datetime | None
    finished_at: _dt.datetime | None
    input: Any
    output: Any
    error: str | None
    by: str | None
    idempotency_key: str | None = None  # the key the step (or its compensation) used


@dataclass(frozen=True)
class Approval:
    """A human decision on an approval request."""

    approved: bool
    by: str
    reason: str | None
    decided_at: _dt.datetime


@dataclass(frozen=True)
class ApprovalRequest:
    """A pending or decided approval request."""

    workflow_id: str
    approval_id: str
    subject: str
    details: Any
    requested_at: _dt.datetime
    expires_at: _dt.datetime | None
    decision: Approval | None
