"""Read models: store rows as the public value types, and a run's outcome as its value or
its error. Everything here reads; nothing writes."""

from __future__ import annotations

from typing import Any

from ._engine.invocation import step_key
from ._errors import (
    BudgetExceeded,
    CorruptRecord,
    LoopDetected,
    NeedsAttention,
    UsageError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
)
from ._model import (
    STATUSES,
    Approval,
    ApprovalRequest,
    BreakerState,
    EntryKind,
    EntryStatus,
    ErrorRecord,
    ErrorType,
    JournalEntry,
    RunStatus,
    Usage,
    WorkflowInfo,
    from_epoch,
    to_epoch,
)
from ._runtime import Runtime
from ._store import RunRow
from ._store.base import ApprovalRow, JournalRow

__all__ = ["Views", "error_text", "journal_key", "run_error"]


def journal_key(workflow_id: str, kind: str, status: str, position: str | None) -> str | None:
    """The idempotency key a journal row's step or compensation used, derived from its stored
    position as the step saw it; ``None`` for other rows and for rows a fork reused (their step
    ran in the source run, under its key)."""
    if position is None or status == EntryStatus.REUSED:
        return None
    if kind == EntryKind.STEP:
        return step_key(workflow_id, position)
    if kind == EntryKind.COMPENSATION:
        return step_key(workflow_id, position, "/undo")
    return None


def run_error(row: RunRow) -> ErrorRecord:
    """The run's recorded error (one of type ``""`` when it has none)."""
    if not row.error:
        return ErrorRecord("")
    try:
        return ErrorRecord.from_json(row.error)
    except ValueError:
        raise CorruptRecord(
            f"run {row.workflow_id!r}: its recorded error {row.error[:80]!r} cannot be decoded; "
            "restore the row from a backup",
            workflow_id=row.workflow_id,
        ) from None


def error_text(error: str | None) -> str | None:
    if error is None:
        return None
    try:
        return ErrorRecord.from_json(error).text()
    except ValueError:
        return error


_ATTENTION: dict[str, type[NeedsAttention]] = {
    ErrorType.BUDGET_EXCEEDED: BudgetExceeded,
    ErrorType.LOOP_DETECTED: LoopDetected,
}
_ATTEMPTS = frozenset({EntryStatus.COMPLETED, EntryStatus.FAILED})  # a reused row ran elsewhere


def _usage_of(workflow_id: str, row: JournalRow) -> Usage | None:
    if row.usage is None:
        return None
    try:
        return Usage.from_json(row.usage)
    except ValueError as exc:
        raise CorruptRecord(
            f"run {workflow_id!r}, seq {row.seq}: {exc}", workflow_id=workflow_id, seq=row.seq
        ) from None


class Views:
    """The app's read side, over its runtime's store."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def row(self, workflow_id: str) -> RunRow:
        row = self.runtime.store.get_run(workflow_id)
        if row is None:
            raise WorkflowNotFound(f"no run with workflow_id {workflow_id!r} in {self.runtime.url}")
        return row

    def outcome(self, row: RunRow) -> Any:
        if row.status == RunStatus.COMPLETED:
            try:
                value = (
                    self.runtime.codec.decode(self.runtime.store.load_payload(row.output))
                    if row.output
                    else None
                )
            except (ValueError, CorruptRecord) as exc:
                raise CorruptRecord(
                    f"run {row.workflow_id!r}: its recorded result cannot be decoded ({exc})",
                    workflow_id=row.workflow_id,
                ) from exc
            wf = self.runtime.registry.workflows.get(row.name)
            return wf.restore(value) if wf is not None and wf.restore else value
        error = run_error(row)
        if row.status == RunStatus.FAILED:
            raise WorkflowFailed(row.workflow_id, error.type or "Error", error.message)
        if row.status == RunStatus.CANCELLED:
            raise WorkflowCancelled(f"run {row.workflow_id!r} was cancelled")
        if row.status == RunStatus.NEEDS_ATTENTION:
            reason = error.reason or error.message
            if error.type == ErrorType.CORRUPT_RECORD:
                raise CorruptRecord(reason, workflow_id=row.workflow_id, seq=error.seq)
            kind = _ATTENTION.get(error.type, NeedsAttention)
            raise kind(
                f"run {row.workflow_id!r} needs attention: {reason}",
                workflow_id=row.workflow_id,
                reason=reason,
            )
        raise RuntimeError(f"run {row.workflow_id!r} is {row.status}, not finished")

    def list_workflows(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        before: Any = None,
    ) -> list[WorkflowInfo]:
        if status is not None and status not in STATUSES:
            raise UsageError(f"status={status!r}: use one of {', '.join(STATUSES)}")
        if not isinstance(limit, int) or limit < 1:
            raise UsageError(f"limit={limit!r}: must be an int >= 1")
        rows = self.runtime.store.list_runs(
            status=status,
            name=name,
            limit=limit,
            before=None if before is None else to_epoch(before),
        )
        return [
            WorkflowInfo(
                workflow_id=r.workflow_id,
                name=r.name,
                status=r.status,
                queue=r.queue,
                created_at=from_epoch(r.created_at),  # type: ignore[arg-type]
                updated_at=from_epoch(r.updated_at),  # type: ignore[arg-type]
                error=error_text(r.error),
            )
            for r in rows
        ]

    def journal(self, workflow_id: str) -> list[JournalEntry]:
        self.row(workflow_id)
        entries = []
        for row in self.runtime.store.journal(workflow_id):
            values = []
            for label, stored in (("input", row.input), ("output", row.output)):
                try:
                    values.append(self.runtime.codec.decode(stored) if stored is not None else None)
                except ValueError as exc:
                    raise CorruptRecord(
                        f"run {workflow_id!r}, seq {row.seq} ({row.kind} {row.name!r}): the "
                        f"recorded {label} cannot be decoded ({exc})",
                        workflow_id=workflow_id,
                        seq=row.seq,
                    ) from exc
            entries.append(
                JournalEntry(
                    seq=row.seq,
                    kind=row.kind,
                    name=row.name,
                    status=row.status,
                    attempt=row.attempt,
                    started_at=from_epoch(row.started_at),
                    finished_at=from_epoch(row.finished_at),
                    input=values[0],
                    output=values[1],
                    error=error_text(row.error),
                    by=row.by,
                    usage=_usage_of(workflow_id, row),
                    idempotency_key=journal_key(workflow_id, row.kind, row.status, row.position),
                )
            )
        return entries

    def usage(self, workflow_id: str) -> Usage:
        """The run's totals: every step attempt's usage, failed attempts included."""
        self.row(workflow_id)
        total = Usage()
        for row in self.runtime.store.journal(workflow_id):
            if row.kind != EntryKind.STEP or row.status not in _ATTEMPTS:
                continue
            spent = _usage_of(workflow_id, row)
            total += spent if spent is not None else Usage(attempts=1)
        return total

    def breakers(self) -> list[BreakerState]:
        """Every breaker the fleet has counted a failure for, as it stands now."""
        now = self.runtime.clock.time()
        return [
            BreakerState(
                name=row.name,
                state=row.state,
                failures=row.failures,
                opened_at=from_epoch(row.opened_at),
                retry_at=from_epoch(row.probe_until if row.state == "half_open" else row.retry_at),
            )
            for row in self.runtime.store.list_breakers(now=now)
        ]

    def approvals(self, pending: bool = True) -> list[ApprovalRequest]:
        return [self.approval(row) for row in self.runtime.store.list_approvals(pending=pending)]

    def approval(self, row: ApprovalRow) -> ApprovalRequest:
        decision = None
        if row.decided_at is not None and row.approved is not None:
            decision = Approval(
                approved=bool(row.approved),
                by=row.by or "",
                reason=row.reason,
                decided_at=from_epoch(row.decided_at),  # type: ignore[arg-type]
            )
        try:
            details = self.runtime.codec.decode(row.details) if row.details is not None else None
        except ValueError as exc:
            raise CorruptRecord(
                f"run {row.workflow_id!r}: approval {row.approval_id} has undecodable details "
                f"({exc}); restore the row from a backup",
                workflow_id=row.workflow_id,
            ) from exc
        return ApprovalRequest(
            workflow_id=row.workflow_id,
            approval_id=row.approval_id,
            subject=row.subject,
            details=details,
            requested_at=from_epoch(row.requested_at),  # type: ignore[arg-type]
            expires_at=from_epoch(row.expires_at),
            decision=decision,
        )
