"""Compensation (saga): when a run fails or is cancelled, undo its completed steps.

Compensations of completed steps that declared one run newest first, each journaled (kind
``compensation``) and retried with its step's policy. A compensated step gets a ``compensated``
row in the same transaction as its compensation's success, so after a crash the rollback goes
on where it stopped (none skipped, none run twice) and a later retry or fork runs the step again.

Before each attempt the run is marked with ``undo:<seq>:<attempt>`` (``runs.retrying``, the
column that marks step retries), so a recovery that finds the mark of an attempt with no
outcome charges it as an ``AttemptInterrupted`` failure: a compensation that crashes its worker
runs out of attempts like a step does, and the run then needs an operator.
"""

from __future__ import annotations

import logging
from typing import Any

from .._errors import CorruptRecord, SerializationError
from .._model import EntryKind, EntryStatus, ErrorRecord, ErrorType
from .._registry import StepDef
from .._runtime import Runtime
from .._serde import Codec
from .._store import Entry
from .._store.base import CompensationRow
from .attempt_loop import run_attempts
from .compensating import Compensation, CompensationFailed, Undo, retry_marker
from .interrupted import LastSeen, interrupted_span
from .invocation import Invocation

__all__ = [
    "CompensationFailed",
    "Undo",
    "interruption",
    "pending_compensations",
    "retry_marker",
    "run_compensations",
]

log = logging.getLogger("stalwart")


_KNOWN: dict[str, tuple[str, ...]] = {
    EntryKind.STEP: (EntryStatus.COMPLETED, EntryStatus.REUSED, EntryStatus.COMPENSATED),
    EntryKind.COMPENSATION: (EntryStatus.COMPLETED, EntryStatus.FAILED),
}


def _corrupt(workflow_id: str, row: CompensationRow, what: str) -> CorruptRecord:
    return CorruptRecord(
        f"run {workflow_id!r}, seq {row.seq} ({row.kind} {row.name!r}): {what}; restore the row "
        "from a backup, then retry the run",
        workflow_id=workflow_id,
        seq=row.seq,
    )


def _check(workflow_id: str, row: CompensationRow) -> None:
    kind, status, attempt = row.kind, row.status, row.attempt
    if status not in _KNOWN.get(kind, ()):
        raise _corrupt(workflow_id, row, f"the recorded status {status!r} is not one it can have")
    if attempt is not None and (type(attempt) is not int or attempt < 0):
        raise _corrupt(workflow_id, row, f"the recorded attempt {attempt!r} is not a count")


def _decoded(codec: Codec, workflow_id: str, row: CompensationRow) -> tuple[Any, Any]:
    """The step's recorded call and result; ``CorruptRecord`` if either cannot be read."""
    try:
        call = codec.decode(row.input) if row.input is not None else {"args": [], "kwargs": {}}
        result = codec.decode(row.output) if row.output is not None else None
    except ValueError as exc:
        raise _corrupt(workflow_id, row, f"its recorded value cannot be decoded ({exc})") from exc
    if not (
        isinstance(call, dict)
        and isinstance(call.get("args", []), list)
        and isinstance(call.get("kwargs", {}), dict)
    ):
        raise _corrupt(workflow_id, row, "its recorded input is not an argument record")
    return call, result


def pending_compensations(
    rows: list[CompensationRow], *, codec: Codec, workflow_id: str
) -> list[Undo]:
    """Pure: from the journal rows of compensable steps and compensations (in order), the
    completed steps still to undo, newest completion first. A row it cannot read raises
    ``CorruptRecord`` naming ``workflow_id`` and the row's seq."""
    completed: dict[int, tuple[int, CompensationRow]] = {}
    undone: set[int] = set()
    attempts: dict[int, int] = {}
    retry_at: dict[int, float] = {}
    for row in rows:
        row_id, seq, status, attempt, kind = row.id, row.seq, row.status, row.attempt, row.kind
        _check(workflow_id, row)
        if kind == EntryKind.STEP and status in (EntryStatus.COMPLETED, EntryStatus.REUSED):
            completed[seq] = (row_id, row)
            undone.discard(seq)
            attempts.pop(seq, None)
        elif kind == EntryKind.STEP and status == EntryStatus.COMPENSATED:
            undone.add(seq)
        elif kind == EntryKind.COMPENSATION and status == EntryStatus.FAILED:
            attempts[seq] = int(attempt or 0)
            retry_at[seq] = _retry_at(row.error)
    plan = []
    for seq, (_row_id, row) in sorted(completed.items(), key=lambda item: -item[1][0]):
        if seq in undone:
            continue
        call, result = _decoded(codec, workflow_id, row)
        plan.append(
            Undo(
                seq,
                row.position,
                row.name,
                list(call.get("args", [])),
                dict(call.get("kwargs", {})),
                result,
                attempts.get(seq, 0),
                retry_at.get(seq, 0.0),
            )
        )
    return plan


def _retry_at(error: str | None) -> float:
    """When the next attempt may start, as a failed compensation's record says (0: at once)."""
    try:
        return float(ErrorRecord.from_json(error).retry_at or 0.0) if error else 0.0
    except ValueError:
        return 0.0


def run_compensations(runtime: Runtime, inv: Invocation) -> None:
    """Undo the run's completed steps, newest first; raise ``CompensationFailed`` when one
    exhausts its retries (the run then needs an operator)."""
    rows = runtime.store.compensation_plan(inv.workflow_id)
    for undo in pending_compensations(rows, codec=runtime.codec, workflow_id=inv.workflow_id):
        step = runtime.registry.step(undo.name)
        if step is None or step.compensate is None:
            raise CompensationFailed(
                f"step {undo.name!r} (seq {undo.seq}) completed with a compensation, but this "
                "code declares none for it: deploy code that does, then retry the run",
                seq=undo.seq,
            )
        _compensate(runtime, inv, step, undo)


def interruption(
    undo: Undo, retrying: str | None, now: float, *, final: bool, seen: LastSeen | None = None
) -> Entry | None:
    """The failed entry that charges the compensation attempt a crash interrupted: the run's
    mark names the attempt after the last recorded one, which began but never ended (``seen``:
    what its holder published of it, for its real start)."""
    attempt = undo.attempts + 1
    if retrying != retry_marker(undo.seq, attempt):
        return None
    started, alive, said = interrupted_span(seen, seq=undo.seq, attempt=attempt, now=now, undo=True)
    detail = ErrorRecord(
        ErrorType.ATTEMPT_INTERRUPTED,
        f"{said}: its process stopped before the outcome was recorded",
        final=final,
    )
    return Entry(
        kind=EntryKind.COMPENSATION,
        name=undo.name,
        status=EntryStatus.FAILED,
        seq=undo.seq,
        position=undo.position,
        attempt=attempt,
        started_at=started,
        finished_at=alive,
        error=detail,
    )


def _compensate(runtime: Runtime, inv: Invocation, step: StepDef, undo: Undo) -> None:
    try:
        result = step.restore(undo.result) if step.restore else undo.result
    except SerializationError as exc:
        raise CompensationFailed(
            f"the compensation of step {step.name!r} (seq {undo.seq}) cannot be given the "
            f"step's recorded result: {exc}; deploy code whose annotation fits it, then retry "
            "the run to continue the rollback",
            seq=undo.seq,
        ) from exc
    policy = step.undo_retry or step.retry
    now = runtime.clock.time()
    final = undo.attempts + 1 >= policy.max_attempts
    charged = interruption(undo, inv.retrying, now, final=final, seen=inv.last_seen)
    attempts = undo.attempts
    if charged is not None:  # retried whatever retry_on says, within max_attempts
        inv.append_many([charged])
        attempts += 1
        if final:
            raise CompensationFailed(
                f"the compensation of step {step.name!r} (seq {undo.seq}) failed after "
                f"{attempts} attempt(s): AttemptInterrupted: each was interrupted by a crash "
                "of its worker; fix the cause, then retry the run to continue the rollback",
                seq=undo.seq,
            )
    run_attempts(Compensation(inv, step, undo, result, attempts=attempts, charged=charged))
    log.info("run %s: compensated %s (seq %d)", inv.workflow_id, step.name, undo.seq)
