"""Operator verbs: send an event, approve or reject, cancel, retry (redrive), resolve an
in-doubt step, fork; and the pure planners they decide with (:func:`fork_plan`,
:func:`failed_for_good`, :func:`redrive_plan`; the compensation order is
``_engine.compensation``'s).

Each verb checks what it is asked against the run as stored, builds the journal entries that
say who did what, and hands them to one store verb whose ``WHERE`` clause re-checks the
precondition, so that a run that changed meanwhile is refused, never overwritten.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
from typing import Any

from . import _inputs
from ._engine.budget import Spend
from ._engine.children import cancel_children, failed_through, retry_children, went_on
from ._engine.keeper import LeaseKeeper
from ._engine.lifecycle import lifecycle
from ._errors import (
    CorruptRecord,
    InvalidOperation,
    SerializationError,
    UnsafeFork,
    UsageError,
    WorkflowAlreadyExists,
    WorkflowNotFound,
)
from ._model import (
    Budget,
    EntryKind,
    EntryStatus,
    ErrorRecord,
    ErrorType,
    RunStatus,
    run_id,
)
from ._runtime import Runtime
from ._serde import UnsupportedValue
from ._store import Entry
from ._store.base import (
    ChildRedrive,
    ForkCandidate,
    IndexRow,
    IngressCount,
    OperatorStore,
    RunRow,
)
from ._views import Views, run_error

__all__ = ["MISSING", "Operator", "failed_for_good", "fork_plan", "redrive_plan"]

log = logging.getLogger("stalwart")
MISSING: Any = object()  # resolve(): no result given


def fork_plan(
    rows: list[ForkCandidate], from_seq: int, *, through: int | None = None
) -> tuple[list[int], list[tuple[int, str]], list[tuple[int, str]]]:
    """Pure: the row ids a fork from ``from_seq`` reuses (the latest completed row of each
    position before it, or a recorded failure the replay must raise again: a child run's,
    or a step's the workflow caught and went on from; and the mark of an irreversible
    step's first attempt, so that a fork of the fork still knows the step is
    irreversible), the completed irreversible steps it
    would run again, and the irreversible steps in doubt (latest row ``scheduled`` with no
    outcome, or ``in_doubt``) anywhere in the journal: the fork would run them again under
    its own idempotency key, whether they lie before ``from_seq`` (not reusable) or after.
    The failure the run ended with (``through``) is not reused: the fork would end with it."""
    latest: dict[str, int] = {}
    marks: dict[int, int] = {}  # seq of an irreversible step -> its first marking row
    for at, row in enumerate(rows):
        latest[row.position] = at
        if row.kind == EntryKind.STEP and row.status in (
            EntryStatus.SCHEDULED,
            EntryStatus.IN_DOUBT,
        ):
            marks.setdefault(row.seq, row.id)
    reuse: list[int] = []
    again: list[tuple[int, str]] = []
    doubtful: list[tuple[int, str]] = []
    for at in latest.values():
        row = rows[at]
        row_id, seq, kind, name, status = row.id, row.seq, row.kind, row.name, row.status
        done = status in (EntryStatus.COMPLETED, EntryStatus.REUSED) or (
            status == EntryStatus.FAILED  # an outcome recorded: a child's end, a caught failure
            and (
                kind in (EntryKind.CHILD, EntryKind.SEND)
                or (kind == EntryKind.STEP and went_on(rows, at, through=through))
            )
        )
        if kind == EntryKind.STEP and status in (EntryStatus.SCHEDULED, EntryStatus.IN_DOUBT):
            doubtful.append((seq, name))
        elif seq < from_seq and done:
            reuse.append(row_id)
            if seq in marks:
                reuse.append(marks[seq])
        elif seq >= from_seq and done and kind == EntryKind.STEP and seq in marks:
            again.append((seq, name))
    return sorted(reuse), sorted(again), sorted(doubtful)


def failed_for_good(
    index: list[IndexRow], *, interrupted: bool = False, through: int | None = None
) -> list[IndexRow]:
    """The step positions whose latest journal row is the final failure the run failed
    through (and, for a poison run, ``interrupted``, the steps whose crashes used up its
    recoveries). A failure the workflow caught and went on from is an outcome its replay
    returns, as a success is: it is not reopened; the one the run ended with (``through``)
    always is."""
    latest: dict[str, int] = {}
    for at, row in enumerate(index):
        latest[row.position] = at
    failed = []
    for at in latest.values():
        row = index[at]
        if row.kind == EntryKind.STEP and row.status == EntryStatus.FAILED and row.error:
            with contextlib.suppress(ValueError):
                detail = ErrorRecord.from_json(row.error)
                crashed = interrupted and detail.type == ErrorType.ATTEMPT_INTERRUPTED
                if (detail.final or crashed) and not went_on(index, at, through=through):
                    failed.append(row)
    return failed


def redrive_plan(
    error: ErrorRecord,
    index: list[IndexRow],
    rollback: bytes | None,
    note: Entry,
    *,
    now: float,
    who: str,
) -> list[Entry]:
    """Pure: the journal entries that redrive a run which ended with ``error``, ``note``
    (the operator's entry) among them.

    A run whose rollback stopped on a compensation (``rollback``: the state of the rollback
    in progress) continues the rollback, not the run: that compensation gets a fresh budget
    and the next invocation goes straight back to the compensations still to do. Any other
    run gets a fresh attempt budget for each step that failed for good (and, for a poison
    run, each step whose crashes used up its recoveries), and replays."""
    redriven = ErrorRecord(ErrorType.REDRIVEN, f"retried by {who}")
    if error.type == ErrorType.COMPENSATION_FAILED and rollback is not None:
        reset = Entry.reset(
            EntryKind.COMPENSATION, "reset", now, seq=error.seq, position=None, error=redriven
        )
        return [reset, note, lifecycle("rolling_back", now, output=rollback)]
    crashed = error.type == ErrorType.WORKER_CRASHED
    failed = failed_for_good(index, interrupted=crashed, through=failed_through(error))
    fresh = [
        Entry.reset(
            EntryKind.STEP, rec.name, now, seq=rec.seq, position=rec.position, error=redriven
        )
        for rec in failed
    ]
    return [*fresh, note]


def larger_budget(
    runtime: Runtime, workflow_id: str, name: str, error: ErrorRecord, budget: Budget | None
) -> dict[str, Any]:
    """The budget a retry gives the run, as journaled; refused when the workflow has
    none, or when a run stopped by its budget would get no more than it had."""
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget={budget!r}: pass a stalwart.Budget(...)")
    wf = runtime.registry.workflows.get(name)
    stopped = error.type in (ErrorType.BUDGET_EXCEEDED, ErrorType.LOOP_DETECTED)
    why = f"stopped at its budget ({error.reason}), and " if stopped else ""
    if wf is None:
        raise InvalidOperation(
            f"run {workflow_id!r} {why}a budget is given by the app that declares its "
            f"workflow {name!r}, which this process (such as the stalwart command) does not: "
            f"call app.retry({workflow_id!r}, budget=stalwart.Budget(...)) there"
        )
    if wf.budget is None:
        raise InvalidOperation(
            f"run {workflow_id!r}: its workflow {name!r} declares no budget; "
            "declare @app.workflow(budget=...) to give its runs one"
        )
    current = Spend.of_run(runtime, workflow_id, wf.budget).budget
    if stopped and (budget is None or not _raises(budget, current)):
        raise InvalidOperation(
            f"run {workflow_id!r} {why}continues only with budget=stalwart.Budget(...) that "
            "raises a limit and lowers none"
        )
    assert budget is not None
    return budget.to_dict()


def _raises(new: Budget, old: Budget) -> bool:
    """Whether ``new`` raises (or lifts) a limit of ``old`` and lowers none."""
    higher = False
    for field in ("max_tokens", "max_cost", "max_steps", "max_repeats"):
        before, after = getattr(old, field), getattr(new, field)
        if before is None and after is not None:
            return False  # a limit the run did not have
        if before is not None and (after is None or after > before):
            higher = True
        elif before is not None and after < before:
            return False
    return higher


def _who(by: str | None) -> str:
    if by:
        return _inputs.name(by, "by") if isinstance(by, str) else by
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _note(runtime: Runtime, action: str, now: float, by: str, detail: Any) -> Entry:
    """The journal entry of an operator action: what, by whom, when."""
    encoded = None if detail is None else runtime.codec.encode(detail)
    return Entry.operator(action, now, by=by, input=encoded)


def _check_event(workflow_id: Any, name: Any, dedup_key: Any) -> None:
    """Refuse what ``send_event`` cannot record, before any store is asked."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"event name {name!r}: pass a non-empty str")
    if isinstance(workflow_id, str):
        _inputs.name(workflow_id, "workflow_id", "send_event")
    _inputs.name(name, "name", "send_event")
    if dedup_key is not None:
        if not isinstance(dedup_key, str) or not dedup_key:
            raise UsageError(f"send_event(dedup_key={dedup_key!r}): pass a non-empty str")
        _inputs.name(dedup_key, "dedup_key", "send_event")


def _check_decision(call: str, approval_id: Any, reason: Any, by: Any) -> None:
    """Refuse an approval id, a reason or a name of who decides that no store can hold."""
    if isinstance(approval_id, str):
        _inputs.name(approval_id, "approval_id", call)
    if isinstance(by, str):
        _inputs.name(by, "by", call)
    if isinstance(reason, str):
        _inputs.text(reason, "reason", call)


def _event_payload(runtime: Runtime, workflow_id: str, name: str, payload: Any) -> bytes:
    """An event's payload as stored; ``SerializationError`` naming the event and the value."""
    try:
        return runtime.codec.encode(payload)
    except UnsupportedValue as exc:
        raise SerializationError(
            f"event {name!r} for run {workflow_id!r}: cannot serialize a payload value of "
            f"type {exc.type_name} at {exc.path.replace('value', 'payload', 1)}"
        ) from None


class Operator:
    """The operator verbs of one app."""

    def __init__(self, runtime: Runtime, keeper: LeaseKeeper, views: Views) -> None:
        self.runtime = runtime
        self.store: OperatorStore = runtime.store  # the verbs call no store verb outside it
        self.keeper = keeper
        self.views = views

    def send_event(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        dedup_key: str | None = None,
        by: str | None = None,
        *,
        count: IngressCount | None = None,
    ) -> bool:
        _check_event(workflow_id, name, dedup_key)
        data = _event_payload(self.runtime, workflow_id, name, payload)
        who = _who(by)
        now = self.runtime.clock.time()
        entry = _note(self.runtime, "send-event", now, who, {"name": name, "dedup_key": dedup_key})
        try:
            delivered = self.store.deliver_event(
                workflow_id,
                name=name,
                payload=data,
                dedup_key=dedup_key,
                now=now,
                entry=entry,
                count=count,
            )
        except KeyError:
            raise WorkflowNotFound(
                f"no run with workflow_id {workflow_id!r} in {self.runtime.name}"
            ) from None
        self.runtime.wakeup.set()
        log.info(
            "run %s: event %r %s by %s",
            workflow_id,
            name,
            "delivered" if delivered else "ignored (repeated dedup_key)",
            who,
        )
        return bool(delivered)

    def _decide(
        self,
        workflow_id: str,
        *,
        approved: bool,
        by: str | None,
        reason: str | None,
        approval_id: str | None,
    ) -> None:
        self.views.row(workflow_id)
        _check_decision("approve" if approved else "reject", approval_id, reason, by)
        store = self.store
        if approval_id is None:
            pending = store.list_approvals(pending=True, workflow_id=workflow_id)
            if not pending:
                raise InvalidOperation(f"run {workflow_id!r} has no pending approval request")
            if len(pending) != 1:
                raise InvalidOperation(
                    f"run {workflow_id!r} has {len(pending)} pending approval requests; pass "
                    "approval_id= to say which (see app.approvals())"
                )
            approval_id = pending[0].approval_id
        who = _who(by)
        now = self.runtime.clock.time()
        verb = "approve" if approved else "reject"
        entry = _note(self.runtime, verb, now, who, {"approval_id": approval_id, "reason": reason})
        if not store.decide_approval(
            workflow_id,
            approval_id,
            approved=approved,
            by=who,
            reason=reason,
            now=now,
            entry=entry,
        ):
            existing = store.get_approval(workflow_id, approval_id)
            if existing is None:
                raise InvalidOperation(
                    f"run {workflow_id!r} has no approval request {approval_id!r}"
                )
            raise InvalidOperation(
                f"approval {approval_id!r} of run {workflow_id!r} was already decided or expired"
            )
        self.runtime.wakeup.set()
        log.info("run %s: approval %s %sd by %s", workflow_id, approval_id, verb, who)

    def approve(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        self._decide(workflow_id, approved=True, by=by, reason=reason, approval_id=approval_id)

    def reject(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        self._decide(workflow_id, approved=False, by=by, reason=reason, approval_id=approval_id)

    def cancel(self, workflow_id: str, by: str | None = None) -> None:
        self.views.row(workflow_id)
        who = _who(by)
        now = self.runtime.clock.time()
        error = ErrorRecord(
            ErrorType.WORKFLOW_CANCELLED, f"run {workflow_id!r} was cancelled by {who}"
        )
        verdict = self.store.cancel_run(
            workflow_id, now=now, error=error, entry=_note(self.runtime, "cancel", now, who, None)
        )
        if verdict == "finished":
            status = self.views.row(workflow_id).status
            if status == RunStatus.CANCELLED and cancel_children(self.runtime, workflow_id, by=who):
                return  # an earlier cancel stopped before its children: this one finished it
            raise InvalidOperation(f"run {workflow_id!r} is {status}; there is nothing to cancel")
        self.keeper.request_cancel(workflow_id)
        log.info("run %s: cancel by %s: %s", workflow_id, who, verdict)
        cancel_children(self.runtime, workflow_id, by=who)

    def retry(self, workflow_id: str, by: str | None = None, budget: Budget | None = None) -> None:
        row = self.views.row(workflow_id)
        if row.status not in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
            raise InvalidOperation(
                f"run {workflow_id!r} is {row.status}; only failed and needs_attention runs "
                "can be retried"
            )
        error = run_error(row, self.runtime.codec.opener)
        if error.type == ErrorType.IN_DOUBT:
            raise InvalidOperation(
                f"run {workflow_id!r} waits on an in-doubt irreversible step (seq "
                f"{error.seq}); settle it with resolve (stalwart resolve {workflow_id} {error.seq} "
                "--result JSON or --rerun; app.resolve in Python), not retry"
            )
        detail: dict[str, Any] = {"from_status": row.status}
        if budget is not None or error.type in (ErrorType.BUDGET_EXCEEDED, ErrorType.LOOP_DETECTED):
            detail["budget"] = larger_budget(self.runtime, row.workflow_id, row.name, error, budget)
        now = self.runtime.clock.time()
        who = _who(by)
        entries = self._redrive_entries(row, error, detail, now=now, who=who)
        children: list[ChildRedrive] = []
        if error.type != ErrorType.COMPENSATION_FAILED:  # children that failed are retried too

            def plan(child: RunRow) -> list[Entry]:
                about = {"from_status": child.status, "with_parent": workflow_id}
                failure = run_error(child, self.runtime.codec.opener)
                return self._redrive_entries(child, failure, about, now=now, who=who)

            through = failed_through(error)
            children, reopen = retry_children(self.runtime, workflow_id, plan, through=through)
            entries = [*reopen, *entries]
        store = self.store
        if not store.redrive(workflow_id, now=now, entries=entries, children=children):
            raise InvalidOperation(
                f"run {workflow_id!r} or one of its children changed while it was being "
                "retried; look again"
            )
        self.runtime.wakeup.set()
        for child in children:
            log.info("run %s: retried with its parent %s", child.workflow_id, child.parent_id)
        log.info("run %s: retried by %s", workflow_id, who)

    def _redrive_entries(
        self, row: RunRow, error: ErrorRecord, detail: dict[str, Any], *, now: float, who: str
    ) -> list[Entry]:
        """The journal entries that redrive ``row`` (see :func:`redrive_plan`)."""
        rollback = self.store.rollback_in_progress(row.workflow_id)
        continues = error.type == ErrorType.COMPENSATION_FAILED and rollback is not None
        index = [] if continues else self.store.replay_index(row.workflow_id)
        note = _note(self.runtime, "retry", now, who, detail)
        return redrive_plan(error, index, rollback, note, now=now, who=who)

    def resolve(
        self,
        workflow_id: str,
        seq: int,
        result: Any = MISSING,
        rerun: bool = False,
        by: str | None = None,
    ) -> None:
        if (result is MISSING) == (not rerun):
            raise UsageError("resolve() takes exactly one of result=... or rerun=True")
        row = self.views.row(workflow_id)
        error = run_error(row, self.runtime.codec.opener)
        if row.status != RunStatus.NEEDS_ATTENTION or error.type != ErrorType.IN_DOUBT:
            raise InvalidOperation(f"run {workflow_id!r} has no in-doubt step to resolve")
        if error.seq != seq:
            raise InvalidOperation(
                f"run {workflow_id!r} is in doubt about seq {error.seq}, not {seq}"
            )
        rec = next(r for r in reversed(self.store.replay_index(workflow_id)) if r.seq == seq)
        now = self.runtime.clock.time()
        who = _who(by)
        if rerun:
            record = ErrorRecord(ErrorType.RESOLVED_RERUN, f"rerun by {who}", rerun=True)
            outcome: dict[str, Any] = {"status": EntryStatus.FAILED, "error": record}
        else:
            try:
                payload = self.runtime.codec.encode(result)
            except UnsupportedValue as exc:
                raise SerializationError(
                    f"resolve({workflow_id!r}, {seq}): cannot serialize a result value of type "
                    f"{exc.type_name}"
                ) from None
            outcome = {"status": EntryStatus.COMPLETED, "output": payload, "by": who}
        entry = Entry(
            kind=EntryKind.STEP,
            name=rec.name,
            seq=seq,
            position=rec.position,
            attempt=rec.attempt,
            started_at=now,
            finished_at=now,
            **outcome,
        )
        detail = {"seq": seq, "rerun": True} if rerun else {"seq": seq, "result": result}
        entries = [entry, _note(self.runtime, "resolve", now, who, detail)]
        if not self.store.redrive(workflow_id, now=now, entries=entries):
            raise InvalidOperation(f"run {workflow_id!r} changed while it was being resolved")
        self.runtime.wakeup.set()
        log.info("run %s: seq %d resolved by %s", workflow_id, seq, who)

    def fork(
        self,
        workflow_id: str,
        from_seq: int,
        new_id: str | None = None,
        allow_reexecute: bool = False,
        by: str | None = None,
    ) -> str:
        row = self.views.row(workflow_id)
        if not isinstance(from_seq, int) or isinstance(from_seq, bool) or from_seq < 1:
            raise InvalidOperation(f"from_seq={from_seq!r}: pass a journal seq (an int >= 1)")
        rows = self.store.fork_candidates(workflow_id)
        end = max((r.seq for r in rows), default=0)
        if from_seq > end + 1:
            raise InvalidOperation(
                f"from_seq={from_seq}: run {workflow_id!r} has journal seqs 1 to {end}; fork "
                f"from one of them, or from {end + 1} to reuse the whole journal"
            )
        through = None
        with contextlib.suppress(CorruptRecord):  # an unreadable error names no failure
            if row.status == RunStatus.FAILED:
                through = failed_through(run_error(row, self.runtime.codec.opener))
        reuse, rerun_irreversible, in_doubt = fork_plan(rows, from_seq, through=through)
        if in_doubt and not allow_reexecute:
            names = ", ".join(f"{name!r} (seq {seq})" for seq, name in in_doubt)
            raise UnsafeFork(
                f"run {workflow_id!r} has the irreversible step(s) {names} in doubt: an "
                "interrupted attempt may have taken effect, and a fork would run it again "
                f"under a new idempotency key; settle it first (stalwart resolve {workflow_id} "
                f"{in_doubt[0][0]} --result JSON, or app.resolve), or allow re-execution "
                "(--allow-reexecute, allow_reexecute=True) if running it again is what you want"
            )
        if rerun_irreversible and not allow_reexecute:
            names = ", ".join(f"{name!r} (seq {seq})" for seq, name in rerun_irreversible)
            raise UnsafeFork(
                f"forking run {workflow_id!r} from seq {from_seq} would run the completed "
                f"irreversible step(s) {names} again; fork from after them, or allow "
                "re-execution (--allow-reexecute, allow_reexecute=True) if running them again "
                "is what you want"
            )
        fork_id = run_id(new_id, label="new_id")
        now = self.runtime.clock.time()
        who = _who(by)
        origin = {"forked_from": workflow_id, "from_seq": from_seq}
        started = lifecycle(
            "started", now, input=row.input, output=self.runtime.codec.encode(origin), by=who
        )
        note = _note(self.runtime, "fork", now, who, {"new_id": fork_id, "from_seq": from_seq})
        if not self.store.fork_run(
            workflow_id,
            new_id=fork_id,
            name=row.name,
            queue=row.queue,
            input=row.input,
            now=now,
            reuse=reuse,
            started=started,
            by=who,
            notes=note,
        ):
            raise WorkflowAlreadyExists(
                f"a run with workflow_id {fork_id!r} already exists; pick another new id "
                "(--new-id, new_id=)"
            )
        self.runtime.wakeup.set()
        log.info("run %s: forked from %s at seq %d by %s", fork_id, workflow_id, from_seq, who)
        return fork_id
