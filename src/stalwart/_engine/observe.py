"""What the engine tells the logs and the observers (``_hooks``): run transitions, failed
attempts, takes and takeovers, waits.

Only what happens live is told: an attempt recorded now, a wait decided now. Replayed history
says nothing, so a run that catches up with a long journal writes no log line for it and
counts no metric twice. Log lines carry the run, step, seq, attempt and worker as ``extra``
fields (``fields``), which the JSON log format prints as keys.
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any

from .._hooks import RunHooks, combine
from .._model import EntryKind, EntryStatus, ErrorRecord, RunStatus
from .._runtime import Runtime
from .._store import Entry, RunRow
from .invocation import Invocation, StepScope

__all__ = [
    "attempt_began",
    "attempt_recorded",
    "begin",
    "carried",
    "end",
    "fields",
    "finished",
    "ready_at",
    "suspended",
    "took",
    "waited",
]

log = logging.getLogger("stalwart")

_TIMEOUT = "StepTimeout"
_INTERRUPTED = "AttemptInterrupted"


def fields(
    workflow_id: str | None,
    worker: str | None,
    *,
    step: str | None = None,
    seq: int | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The ``extra`` of a log line about a run (and a step attempt in it)."""
    return {
        "workflow_id": workflow_id,
        "step": step,
        "seq": seq,
        "attempt": attempt,
        "worker": worker,
    }


def ready_at(row: RunRow, now: float) -> float:
    """When the run became runnable, as its row says: a due timer or a delivered event (which
    sets ``wake_at``), a lapsed lease, else its last change (created, released, redriven)."""
    if row.status == RunStatus.SUSPENDED and row.wake_at is not None:
        return min(row.wake_at, now)
    if row.status == RunStatus.RUNNING and row.lease_expires_at is not None:
        return min(row.lease_expires_at, now)
    return min(row.updated_at, now)


def carried(runtime: Runtime) -> str | None:
    """What a run created now carries from its caller, for the observers (a trace context)."""
    for observer in runtime.observers:
        found = observer.carried()
        if found is not None:
            return found
    return None


def took(runtime: Runtime, row: RunRow, now: float, *, holder: str | None, takeover: bool) -> None:
    """A worker took run ``row``: log a takeover, tell the observers."""
    if takeover:
        why = (
            f"from {holder}, which stopped or whose lease lapsed"
            if holder
            else "again: its last execution stopped without recording an outcome"
        )
        log.warning(
            "run %s: taken over %s",
            row.workflow_id,
            why,
            extra=fields(row.workflow_id, runtime.owner),
        )
    waited = max(0.0, now - ready_at(row, now))
    for observer in runtime.observers:
        observer.took(row.name, waited, takeover=takeover)


def begin(runtime: Runtime, inv: Invocation, row: RunRow) -> None:
    """An execution of the run begins: say so, and give it the observers' hooks."""
    if log.isEnabledFor(logging.INFO):  # (its fields are built once a run: only if logged)
        log.info(
            "run %s: %s (workflow %s)",
            inv.workflow_id,
            "resumed" if inv.recorded else "started",
            inv.wf.name,
            extra=fields(inv.workflow_id, runtime.owner),
        )
    if runtime.observers:
        inv.observe = combine(
            [
                observer.run(
                    workflow=inv.wf.name,
                    workflow_id=inv.workflow_id,
                    trace_context=row.trace_context,
                )
                for observer in runtime.observers
            ]
        )


def end(inv: Invocation, status: str) -> None:
    """The execution ended with ``status`` (an ``OutcomeKind``)."""
    hooks = inv.observe
    if hooks is not None:
        inv.observe = None
        hooks.ended(status)


def finished(runtime: Runtime, inv: Invocation, status: str, error: str | None) -> None:
    """Log how the run ended: its status and, unless it completed, its error's type and
    message (a WARNING when it failed or waits on an operator)."""
    if status == RunStatus.COMPLETED or error is None:
        if log.isEnabledFor(logging.INFO):
            log.info(
                "run %s: %s", inv.workflow_id, status, extra=fields(inv.workflow_id, runtime.owner)
            )
        return
    extra = fields(inv.workflow_id, runtime.owner)
    try:
        record = ErrorRecord.from_json(error)
        kind, message = str(record.type), record.reason or record.message
    except ValueError:
        kind, message = "Unknown", error
    level = logging.INFO if status == RunStatus.CANCELLED else logging.WARNING  # alerts see it
    log.log(level, "run %s: %s: %s: %s", inv.workflow_id, status, kind, message, extra=extra)


def suspended(
    runtime: Runtime, inv: Invocation, waiting_for: str | None, wake_at: float | None
) -> None:
    """Log that the run suspended, and on what."""
    what = (
        waiting_for.replace(":", " ", 1)
        if waiting_for
        # as describe() says it
        else (
            "a timer"
            if wake_at is None
            else f"a timer until {_dt.datetime.fromtimestamp(wake_at, _dt.UTC).isoformat()}"
        )
    )
    log.info(
        "run %s: suspended, waiting for %s",
        inv.workflow_id,
        what,
        extra=fields(inv.workflow_id, runtime.owner),
    )


def _outcome(entry: Entry, ran_here: bool) -> tuple[str | None, ErrorRecord | None]:
    if entry.status == EntryStatus.COMPLETED:
        return "completed", None
    if entry.status == EntryStatus.IN_DOUBT:  # abandoned after its timeout, or interrupted
        return ("timeout" if ran_here else "interrupted"), None
    if entry.status != EntryStatus.FAILED or entry.error is None:
        return None, None  # scheduled: not an outcome
    record = entry.error
    if record.type == _TIMEOUT:
        return "timeout", record
    if record.type == _INTERRUPTED:
        return "interrupted", record
    if record.type == "WorkflowCancelled":  # heartbeat saw the run cancelled
        return "stopped", record
    return "failed", record


def attempt_recorded(inv: Invocation, scope: StepScope | None, entry: Entry) -> None:
    """A step attempt's outcome was just journaled: log a failure, tell the hooks."""
    attempt = entry.attempt or 0
    ran_here = scope is not None and scope.attempt == attempt
    outcome, record = _outcome(entry, ran_here)
    if outcome is None:
        return
    if outcome == "stopped":
        log.info(
            "run %s: step %s (seq %s) attempt %s stopped: the run was cancelled",
            inv.workflow_id,
            entry.name,
            entry.seq,
            attempt,
            extra=fields(inv.workflow_id, inv.runtime.owner),
        )
    elif outcome != "completed":
        _log_failure(inv, entry, outcome, record)
    hooks = inv.observe
    if hooks is None:
        return
    token = None
    if ran_here and scope is not None:
        token, scope.span = scope.span, None
    started = entry.started_at or 0.0
    finished_at = entry.finished_at or started
    ran = ran_here and outcome != "interrupted"
    hooks.attempt_ended(
        token,
        step=entry.name,
        seq=entry.seq or 0,
        attempt=attempt,
        outcome=outcome,
        seconds=max(0.0, finished_at - started) if ran else None,
        usage=entry.usage,
    )


def _log_failure(inv: Invocation, entry: Entry, outcome: str, record: ErrorRecord | None) -> None:
    extra = fields(
        inv.workflow_id, inv.runtime.owner, step=entry.name, seq=entry.seq, attempt=entry.attempt
    )
    what = f"{record.type}: {record.message}" if record is not None else outcome
    if record is None or record.final:
        then = "no attempt is left" if record is not None else "it may have taken effect"
    else:
        now = entry.finished_at or entry.started_at or 0.0
        delay = max(0.0, (record.retry_at or 0.0) - now)
        then = f"next attempt in {delay:.3g} s"
        if record.directed:
            then += f" ({record.directed})"
    log.warning(
        "run %s: %s %s (seq %s) attempt %d %s: %s; %s",
        inv.workflow_id,
        "compensation of step" if entry.kind == EntryKind.COMPENSATION else "step",
        entry.name,
        entry.seq,
        entry.attempt,
        "timed out" if outcome == "timeout" else outcome,
        what,
        then,
        extra=extra,
    )


def attempt_stopped(inv: Invocation, scope: StepScope) -> None:
    """A lost lease stopped a live attempt: nothing is journaled for it here, and its span
    ends with outcome ``stopped``."""
    hooks = inv.observe
    if hooks is None:
        return
    token, scope.span = scope.span, None
    hooks.attempt_ended(
        token,
        step=scope.name,
        seq=scope.seq,
        attempt=scope.attempt,
        outcome="stopped",
        seconds=None,
        usage=None,
    )


def attempt_began(hooks: RunHooks, scope: StepScope) -> Any:
    """A live attempt begins: its hooks' token (a span), kept on the scope until recorded."""
    scope.span = hooks.attempt(scope.name, scope.seq, scope.attempt)
    return hooks.attempt_current(scope.span)


def waited(inv: Invocation, kind: str, name: str, started: float, outcome: str) -> None:
    """A wait was decided now (``outcome``: its winner) or the run suspends on it."""
    hooks = inv.observe
    if hooks is not None:
        hooks.waited(kind, name, started, inv.runtime.clock.time(), outcome)
