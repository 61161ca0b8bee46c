"""Read models: store rows as the public value types, and a run's outcome as its value or
its error. Everything here reads; nothing writes."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import _inputs
from ._engine.invocation import step_key
from ._errors import (
    BudgetExceeded,
    CorruptRecord,
    EncryptionKeyMissing,
    LoopDetected,
    NeedsAttention,
    UsageError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
)
from ._fleet_views import FleetViews
from ._keyring import open_text, shown
from ._leases import worker_of
from ._model import (
    STATUSES,
    Approval,
    ApprovalRequest,
    CurrentStep,
    EntryKind,
    EntryStatus,
    ErrorRecord,
    ErrorType,
    JournalEntry,
    RunDetail,
    RunStatus,
    Usage,
    WorkflowInfo,
    from_epoch,
    to_epoch,
)
from ._runtime import Runtime
from ._serde import Codec
from ._store import RunRow
from ._store.base import ApprovalRow, JournalRow, ReadModelStore, UsageRow

__all__ = [
    "Views",
    "approval_details",
    "decoded",
    "entry_of",
    "error_text",
    "journal_key",
    "run_error",
    "usage_of",
]


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


def run_error(row: RunRow, opener: Callable[[bytes], bytes] | None = None) -> ErrorRecord:
    """The run's recorded error (one of type ``""`` when it has none); ``opener`` restores
    a sealed message."""
    if not row.error:
        return ErrorRecord("")
    try:
        return ErrorRecord.from_json(row.error, opener)
    except ValueError:
        raise CorruptRecord(
            f"run {row.workflow_id!r}: its recorded error {row.error[:80]!r} cannot be decoded; "
            "restore the row from a backup",
            workflow_id=row.workflow_id,
        ) from None


def error_text(error: str | None, opener: Callable[[bytes], bytes] | None = None) -> str | None:
    if error is None:
        return None
    try:
        return ErrorRecord.from_json(error, opener).text()
    except ValueError:
        return error


_ATTENTION: dict[str, type[NeedsAttention]] = {
    ErrorType.BUDGET_EXCEEDED: BudgetExceeded,
    ErrorType.LOOP_DETECTED: LoopDetected,
}


def info_of(row: RunRow) -> WorkflowInfo:
    """A run's row as :class:`WorkflowInfo`."""
    return WorkflowInfo(
        workflow_id=row.workflow_id,
        name=row.name,
        status=row.status,
        queue=row.queue,
        created_at=from_epoch(row.created_at),  # type: ignore[arg-type]
        updated_at=from_epoch(row.updated_at),  # type: ignore[arg-type]
        error=error_text(row.error),
        parent_id=row.parent_id,
    )


def _check_filters(
    status: str | None, queue: str | None, name: str | None, parent_id: str | None
) -> None:
    if status is not None and status not in STATUSES:
        raise UsageError(f"status={status!r}: use one of {', '.join(STATUSES)}")
    if queue is not None and (not isinstance(queue, str) or not queue):
        raise UsageError(f"queue={queue!r}: pass a queue name")
    if name is not None and not isinstance(name, str):
        raise UsageError(f"name={name!r}: pass a workflow name (a str), or None")
    if parent_id is not None and not isinstance(parent_id, str):
        raise UsageError(f"parent_id={parent_id!r}: pass a run id (a str), or None")
    for label, value in (("queue", queue), ("name", name), ("parent_id", parent_id)):
        if value is not None:
            _inputs.name(value, label)


def _row_id(value: Any, least: int) -> bool:
    """Whether ``value`` is an int from ``least`` up that a store's row id column holds."""
    return not isinstance(value, bool) and isinstance(value, int) and least <= value < 2**63


def _cursor(before: Any) -> tuple[float | None, str | None]:
    """Where a page ends: a :class:`WorkflowInfo` (the last run of the previous page, exact
    even when runs share a creation time) or a time (a datetime or epoch seconds)."""
    if before is None:
        return None, None
    if isinstance(before, WorkflowInfo):
        return to_epoch(before.created_at), before.workflow_id
    return _when(before, "before"), None


def _when(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    ):
        return to_epoch(value)
    raise UsageError(f"{what}={value!r}: pass a datetime or epoch seconds")


def _approval_key(row: RunRow) -> str | None:
    """The id of the approval request a suspended run waits on, if it waits on one."""
    kind, _, key = (row.waiting_for or "").partition(":")
    return key if row.status == RunStatus.SUSPENDED and kind == "approval" else None


def usage_of(workflow_id: str, row: JournalRow | UsageRow) -> Usage | None:
    if row.usage is None:
        return None
    try:
        return Usage.from_json(row.usage)
    except ValueError as exc:
        raise CorruptRecord(
            f"run {workflow_id!r}, seq {row.seq}: {exc}", workflow_id=workflow_id, seq=row.seq
        ) from None


def run_usage(store: ReadModelStore, workflow_id: str) -> Usage:
    """A run's totals as the store keeps them (one row), or counted from its journal for a
    run journaled before the store kept them."""
    totals = store.run_spend(workflow_id)
    if totals is None:
        return Usage()
    if not totals.since_start:
        return _usage_of_journal(store, workflow_id)
    tokens_in, tokens_out = totals.input_tokens, totals.output_tokens
    return Usage(tokens_in, tokens_out, totals.cost, totals.attempts, totals.partial)


def _usage_of_journal(store: ReadModelStore, workflow_id: str) -> Usage:
    """The run's totals counted from its journal, by the rules the store's totals follow."""
    total = Usage()  # reused (forked) rows are not counted: they ran in another run
    interrupted: set[str] = set()  # steps with an attempt whose usage a crash lost
    recording: set[str] = set()  # steps with an attempt that recorded usage
    kept: set[int | None] = set()  # seqs whose abandoned attempt's usage is in_doubt
    for row in store.step_usage(workflow_id):
        spent = usage_of(workflow_id, row)
        if row.status == EntryStatus.IN_DOUBT:
            if spent is None:  # interrupted by a crash, its usage lost
                interrupted.add(row.name)
            else:  # abandoned at its timeout, with what it used
                recording.add(row.name)
                kept.add(row.seq)
                total += replace(spent, attempts=0)
            continue  # the attempt it marks is counted where it failed or completed
        if _was_interrupted(row.error) and row.seq not in kept:
            interrupted.add(row.name)
        kept.discard(row.seq)  # the end of the attempt an in_doubt row kept the usage of
        if spent is not None:
            recording.add(row.name)
        total += spent if spent is not None else Usage(attempts=1)
    if interrupted & recording:
        total += Usage(partial=True)
    return total


def _was_interrupted(error: str | None) -> bool:
    """Whether a failed attempt's error says a crash interrupted it (its usage was lost)."""
    if error is None:
        return False
    try:
        return ErrorRecord.from_json(error).type == ErrorType.ATTEMPT_INTERRUPTED
    except ValueError:
        return False


def decoded(codec: Codec, workflow_id: str, row: JournalRow, label: str, stored: bytes) -> Any:
    """A journal row's stored ``label`` (input or output) decoded; ``CorruptRecord`` naming
    the run and the seq when it cannot be."""
    try:
        return codec.decode(stored)
    except EncryptionKeyMissing as exc:  # a read model shows it without the key
        return shown(exc.key_id)
    except ValueError as exc:
        raise CorruptRecord(
            f"run {workflow_id!r}, seq {row.seq} ({row.kind} {row.name!r}): the "
            f"recorded {label} cannot be decoded ({exc})",
            workflow_id=workflow_id,
            seq=row.seq,
        ) from exc


def entry_of(codec: Codec, workflow_id: str, row: JournalRow) -> JournalEntry:
    """A journal row as the public entry, its input and output decoded."""
    values = [
        None if stored is None else decoded(codec, workflow_id, row, label, stored)
        for label, stored in (("input", row.input), ("output", row.output))
    ]
    return JournalEntry(
        seq=row.seq,
        kind=row.kind,
        name=row.name,
        status=row.status,
        attempt=row.attempt,
        started_at=from_epoch(row.started_at),
        finished_at=from_epoch(row.finished_at),
        input=values[0],
        output=values[1],
        error=error_text(row.error, codec.opener),
        by=row.by,
        usage=usage_of(workflow_id, row),
        idempotency_key=journal_key(workflow_id, row.kind, row.status, row.position),
        id=row.id,
    )


def approval_details(codec: Codec, row: ApprovalRow) -> Any:
    """An approval request's details, decoded."""
    try:
        return codec.decode(row.details) if row.details is not None else None
    except EncryptionKeyMissing as exc:  # a read model shows it without the key
        return shown(exc.key_id)
    except ValueError as exc:
        raise CorruptRecord(
            f"run {row.workflow_id!r}: approval {row.approval_id} has undecodable details "
            f"({exc}); restore the row from a backup",
            workflow_id=row.workflow_id,
        ) from exc


class Views(FleetViews):
    """The app's read side, over its runtime's store (its ``store`` is the store's read roles,
    none of its writes: the type checker holds every read below to that)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def row(self, workflow_id: str) -> RunRow:
        if isinstance(workflow_id, str):
            _inputs.name(workflow_id, "workflow_id")  # no store could hold it
        row = self.store.get_run(workflow_id)
        if row is None:
            raise WorkflowNotFound(
                f"no run with workflow_id {workflow_id!r} in {self.runtime.name}"
            )
        return row

    def outcome(self, row: RunRow) -> Any:
        if row.status == RunStatus.COMPLETED:
            try:
                value = (
                    self.runtime.codec.decode(self.store.load_payload(row.output))
                    if row.output
                    else None
                )
            except EncryptionKeyMissing as exc:
                raise exc.at(row.workflow_id, None) from None
            except (ValueError, CorruptRecord) as exc:
                raise CorruptRecord(
                    f"run {row.workflow_id!r}: its recorded result cannot be decoded ({exc})",
                    workflow_id=row.workflow_id,
                ) from exc
            wf = self.runtime.registry.workflows.get(row.name)
            return wf.restore(value) if wf is not None and wf.restore else value
        error = run_error(row, self.runtime.codec.opener)
        if row.status == RunStatus.FAILED:
            raise WorkflowFailed(row.workflow_id, error.type or "Error", error.message)
        if row.status == RunStatus.CANCELLED:  # its deadline, an operator, its parent: why
            raise WorkflowCancelled(error.message or f"run {row.workflow_id!r} was cancelled")
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
        *,
        queue: str | None = None,
        since: Any = None,
        parent_id: str | None = None,
    ) -> list[WorkflowInfo]:
        rows = self._page(
            status, name, limit, before, queue=queue, since=since, parent_id=parent_id
        )
        return [info_of(r) for r in rows]

    def list_waiting(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        before: Any = None,
        *,
        queue: str | None = None,
        since: Any = None,
        parent_id: str | None = None,
    ) -> list[tuple[WorkflowInfo, str | None]]:
        """``list_workflows`` with what each run waits on, read with the page (one read of
        the queues and one per approval waited on, not a ``describe`` per run)."""
        rows = self._page(
            status, name, limit, before, queue=queue, since=since, parent_id=parent_id
        )
        declared = None
        if any(r.status == RunStatus.PENDING for r in rows):
            declared = {q.name for q in self.store.list_queues()}
        asked = [r.workflow_id for r in rows if _approval_key(r) is not None]
        subjects = {
            (a.workflow_id, a.approval_id): a.subject for a in self.store.approvals_of(asked)
        }
        return [(info_of(r), self._waiting_for(r, declared, subjects)) for r in rows]

    def _page(
        self,
        status: str | None,
        name: str | None,
        limit: int,
        before: Any,
        *,
        queue: str | None,
        since: Any,
        parent_id: str | None = None,
    ) -> list[RunRow]:
        _check_filters(status, queue, name, parent_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"limit={limit!r}: must be an int >= 1")
        before_at, before_id = _cursor(before)
        return self.store.list_runs(
            status=status,
            name=name,
            limit=limit,
            before=before_at,
            before_id=before_id,
            queue=queue,
            since=_when(since, "since"),
            parent_id=parent_id,
        )

    def count_workflows(
        self,
        status: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        since: Any = None,
        parent_id: str | None = None,
    ) -> int:
        _check_filters(status, queue, name, parent_id)
        return self.store.count_runs(
            status=status, name=name, queue=queue, since=_when(since, "since"), parent_id=parent_id
        )

    def describe(self, workflow_id: str) -> RunDetail:
        row = self.row(workflow_id)
        return RunDetail(
            info=info_of(row),
            waiting_for=self._waiting_for(row),
            current=self._current(row),
            usage=run_usage(self.store, workflow_id),
        )

    def _waiting_for(
        self,
        row: RunRow,
        declared: set[str] | None = None,
        subjects: dict[tuple[str, str], str] | None = None,
    ) -> str | None:
        """What the run waits on; ``declared`` (the declared queues) and ``subjects`` (the
        subjects of the approvals a page of runs waits on) when the caller read them for many
        runs at once."""
        if row.status == RunStatus.PENDING:
            if declared is None:
                declared = {q.name for q in self.store.list_queues()}
            return f"queue {row.queue}" if row.queue in declared else None
        if row.status != RunStatus.SUSPENDED:
            return None
        kind, _, key = (row.waiting_for or "").partition(":")
        if kind == "approval":
            if subjects is None:
                request = self.store.get_approval(row.workflow_id, key)
                return f"approval {request.subject if request is not None else key}"
            return f"approval {subjects.get((row.workflow_id, key), key)}"
        if kind in ("event", "breaker", "child"):
            return f"{kind} {key}"
        until = from_epoch(row.wake_at)
        return "timer" if until is None else f"timer until {until.isoformat()}"

    def _current(self, row: RunRow) -> CurrentStep | None:
        if row.status != RunStatus.RUNNING or not row.current_step:
            return None
        try:
            step = json.loads(row.current_step)
            heartbeat = (
                None
                if row.progress is None
                else self.runtime.codec.decode(self.store.load_payload(row.progress))
            )
        except (ValueError, CorruptRecord):
            return None  # what operators read only: a damaged note is not worth an error
        return CurrentStep(
            name=step["name"],
            seq=step["seq"],
            attempt=step["attempt"],
            started_at=from_epoch(step["started_at"]),  # type: ignore[arg-type]
            heartbeat=heartbeat,
            holder=None if row.lease_owner is None else worker_of(row.lease_owner),
        )

    def journal(
        self, workflow_id: str, after: int | None = None, limit: int | None = None
    ) -> list[JournalEntry]:
        codec = self.runtime.codec
        rows = self.journal_rows(workflow_id, after, limit)
        return [entry_of(codec, workflow_id, row) for row in rows]

    def journal_rows(
        self, workflow_id: str, after: int | None = None, limit: int | None = None
    ) -> list[JournalRow]:
        self.row(workflow_id)
        if after is not None and not _row_id(after, 0):
            raise UsageError(f"after={after!r}: pass the id of a journal entry (an int >= 0)")
        if limit is not None and not _row_id(limit, 1):
            raise UsageError(f"limit={limit!r}: must be an int >= 1")
        return self.store.journal(workflow_id, after=after, limit=limit)

    def journal_size(self, workflow_id: str) -> int:
        self.row(workflow_id)
        return self.store.journal_size(workflow_id)

    def usage(self, workflow_id: str) -> Usage:
        """The run's totals: every step attempt's usage, failed attempts included."""
        self.row(workflow_id)
        return run_usage(self.store, workflow_id)

    def approvals(self, pending: bool = True) -> list[ApprovalRequest]:
        return [self.approval(row) for row in self.store.list_approvals(pending=pending)]

    def pending_approvals(self) -> int:
        return self.store.count_pending_approvals()

    def approval(self, row: ApprovalRow) -> ApprovalRequest:
        decision = None
        if row.decided_at is not None and row.approved is not None:
            decision = Approval(
                approved=bool(row.approved),
                by=row.by or "",
                reason=open_text(self.runtime.codec.opener, row.reason),
                decided_at=from_epoch(row.decided_at),  # type: ignore[arg-type]
            )
        return ApprovalRequest(
            workflow_id=row.workflow_id,
            approval_id=row.approval_id,
            subject=row.subject,
            details=approval_details(self.runtime.codec, row),
            requested_at=from_epoch(row.requested_at),  # type: ignore[arg-type]
            expires_at=from_epoch(row.expires_at),
            decision=decision,
        )
