"""Child runs, from the parent's side.

A start is one journaled call (``kind`` ``child``, named for the child's workflow): the
transaction that journals it in the parent also creates the child, ``pending``, for any worker.
Its default id is the parent's id, ``/`` and the start's position (the form of idempotency
keys), so a replay finds the same child. Waiting on a child is a durable wait: the parent
suspends ``waiting_for`` ``child:<id>`` and holds nothing; the transaction that ends the child
wakes it, and the parent records the child's outcome at the start's position the first time it
sees it, so that every later replay returns the same answer.

A parent that ends failed or cancelled cancels its unfinished children (their compensations
run), and so does an operator's cancel; a parent's retry redrives its failed and cancelled
children and reopens its waits on them. A detached child is passed by (it outlives its
parent). The parent cancels one child with ``cancel``: journaled (``kind`` ``child``, named
``cancel <workflow>``), so a replay does not cancel again. ``app.run`` executes the children
of its run that no worker has claimed (``Driver.help_children``, in ``driver.py``, which sits
above).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import WorkflowAlreadyExists, WorkflowCancelled, WorkflowFailed
from .._model import TERMINAL, EntryKind, EntryStatus, ErrorRecord, ErrorType, RunStatus
from .._registry import WorkflowDef
from .._runtime import Runtime
from .._signals import LeaseLost
from .._store import Entry, RunRow
from .._store.base import ChildRedrive
from .flows import Flow, drive, drive_async
from .invocation import (
    Invocation,
    Recorded,
    final_failure,
    guarded,
    guarded_async,
    step_key,
)
from .lifecycle import lifecycle
from .observe import carried

__all__ = [
    "ChildRef",
    "attention_below",
    "cancel",
    "cancel_children",
    "failed_through",
    "result",
    "result_async",
    "retry_children",
    "start",
    "start_async",
    "went_on",
]

log = logging.getLogger("stalwart")


@dataclass(frozen=True, slots=True)
class ChildRef:
    """A child run as its parent's journal names it."""

    workflow_id: str
    name: str
    position: str
    seq: int


@dataclass(slots=True)
class _Calls:
    """A run's child calls under way: the explicit ids whose start is being written, with the
    position starting each; and a lock per start whose end an async task records."""

    starting: dict[str, str] = field(default_factory=dict)
    ends: dict[str, asyncio.Lock] = field(default_factory=dict)


_CALLS: weakref.WeakKeyDictionary[Invocation, _Calls] = weakref.WeakKeyDictionary()


def _calls(inv: Invocation) -> _Calls:
    """The child calls under way of invocation ``inv`` (none, at first)."""
    calls = _CALLS.get(inv)
    if calls is None:
        calls = _CALLS[inv] = _Calls()
    return calls


def _recorded_id(inv: Invocation, rec: Recorded) -> str:
    """The child id a recorded start names (in its spec while open, in its outcome after)."""
    stored = rec.input if rec.status == EntryStatus.SCHEDULED else rec.output
    if stored is None:
        raise inv.corrupt(rec, "the recorded child start names no child run")
    value = inv.decode_recorded(rec, "child", stored)
    if not isinstance(value, dict) or not isinstance(value.get("workflow_id"), str):
        raise inv.corrupt(rec, f"the recorded child {value!r} names no child run")
    return str(value["workflow_id"])


def _started_elsewhere(inv: Invocation, child_id: str, position: str) -> str | None:
    """The other position at which this run started child ``child_id``, or is starting it
    (another task's start whose write is under way), if any (a row that names no child, such
    as a redrive's reset, starts none)."""
    if _calls(inv).starting.get(child_id, position) != position:
        return _calls(inv).starting[child_id]
    for rec in inv.recorded.values():
        if rec.kind != EntryKind.CHILD or rec.position == position:
            continue
        stored = rec.input if rec.status == EntryStatus.SCHEDULED else rec.output
        try:
            value = None if stored is None else inv.runtime.codec.decode(stored)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("workflow_id") == child_id:
            return rec.position
    return None


def _deadline(inv: Invocation, wf: WorkflowDef, now: float, detached: bool) -> float | None:
    """The child's own deadline, or its parent's if that comes first (not for a detached
    child, which outlives its parent)."""
    own = None if wf.timeout is None else now + wf.timeout
    if inv.deadline is None or detached:
        return own
    return inv.deadline if own is None else min(own, inv.deadline)


def _start(
    inv: Invocation,
    wf: WorkflowDef,
    payload: bytes,
    workflow_id: str | None,
    queue: str | None,
    *,
    detached: bool,
) -> Flow[ChildRef]:
    inv.check_alive()
    position = inv.next_position()
    rec = inv.lookup(position, EntryKind.CHILD, wf.name)
    if rec is not None:
        return ChildRef(_recorded_id(inv, rec), wf.name, position, rec.seq)
    runtime = inv.runtime
    child_id = step_key(inv.workflow_id, position) if workflow_id is None else workflow_id
    if workflow_id is not None and (elsewhere := _started_elsewhere(inv, child_id, position)):
        raise WorkflowAlreadyExists(
            f"run {child_id!r} is already the child this run started at position {elsewhere}; "
            "give each start_child its own workflow_id="
        )
    now = runtime.clock.time()
    seq = inv.alloc_seq()
    spec = runtime.codec.encode({"workflow_id": child_id})
    entry = Entry(
        kind=EntryKind.CHILD,
        name=wf.name,
        status=EntryStatus.SCHEDULED,
        seq=seq,
        position=position,
        started_at=now,
        input=spec,
    )
    if workflow_id is not None:
        _calls(inv).starting[child_id] = position
    try:
        verdict = yield functools.partial(
            _write_start,
            inv,
            entry,
            workflow_id=child_id,
            name=wf.name,
            queue=wf.queue if queue is None else queue,
            input=payload,
            now=now,
            started=lifecycle("started", now, input=payload),
            deadline=_deadline(inv, wf, now, detached),
            trace_context=carried(runtime) if runtime.observers else None,
            detached=detached,
        )
    finally:  # (recorded below, with nothing awaited in between, when it started)
        _calls(inv).starting.pop(child_id, None)
    if verdict == "lost":
        inv.lease_lost.set()
        raise LeaseLost()
    if verdict == "cancelling":
        inv.cancel_requested.set()
        inv.check_alive()
    if verdict == "taken":
        raise WorkflowAlreadyExists(
            f"run {child_id!r} already exists and is not a {wf.name!r} child of run "
            f"{inv.workflow_id!r}; pass another workflow_id= to start_child"
        )
    inv.recovering = False
    inv.recorded[position] = Recorded(
        seq, position, EntryKind.CHILD, wf.name, EntryStatus.SCHEDULED, 0, None, None, spec
    )
    runtime.wakeup.set()
    log.info("run %s: started child %s (%s)", inv.workflow_id, child_id, wf.name)
    return ChildRef(child_id, wf.name, position, seq)


def _write_start(inv: Invocation, entry: Entry, **child: Any) -> str:
    """(A start's write) Journal the start in the parent and create the child, in one
    transaction fenced by the parent's lease: the store's verdict."""
    with inv.journaling():
        return inv.runtime.store.start_child(inv.workflow_id, entry, owner=inv.owner, **child)


@guarded
def start(
    inv: Invocation,
    wf: WorkflowDef,
    payload: bytes,
    workflow_id: str | None,
    queue: str | None,
    *,
    detached: bool = False,
) -> ChildRef:
    """Start child run ``wf`` (or find the one this position started before); a
    ``detached`` one is not cancelled, covered by the deadline or retried with its parent."""
    return drive(_start(inv, wf, payload, workflow_id, queue, detached=detached))


@guarded_async
async def start_async(
    inv: Invocation,
    wf: WorkflowDef,
    payload: bytes,
    workflow_id: str | None,
    queue: str | None,
    *,
    detached: bool = False,
) -> ChildRef:
    """:func:`start` in an ``async def`` workflow: its write is made off the run's loop."""
    return await drive_async(inv, _start(inv, wf, payload, workflow_id, queue, detached=detached))


def _result(inv: Invocation, ref: ChildRef) -> Flow[Any]:
    inv.check_alive()
    rec = inv.recorded.get(ref.position)
    if rec is None or rec.seq != ref.seq:
        raise RuntimeError(
            f"child {ref.workflow_id!r} was not started by this execution of run "
            f"{inv.workflow_id!r}; wait on a ChildHandle in the workflow run that started it"
        )
    if rec.status == EntryStatus.SCHEDULED:
        row = yield functools.partial(_read, inv, inv.runtime.store.get_run, ref.workflow_id)
        if row is None:
            raise inv.corrupt(rec, f"its child run {ref.workflow_id!r} does not exist")
        if row.status not in TERMINAL:
            raise inv.suspend(wake_at=None, waiting_for=f"child:{ref.workflow_id}")
        rec = yield from _settle(inv, rec, ref, row)
    if rec.status == EntryStatus.COMPLETED:
        return _value(inv, rec, ref)
    raise final_failure(inv, _failure(inv, rec, ref), ref.seq)


def _read(inv: Invocation, read: Callable[[Any], Any], key: Any) -> Any:
    """(A store call of a flow) ``read(key)`` on behalf of workflow code."""
    with inv.journaling():
        return read(key)


@guarded
def result(inv: Invocation, ref: ChildRef) -> Any:
    """The child's result, or its failure as ``WorkflowFailed`` / ``WorkflowCancelled``;
    suspends the parent until the child ends."""
    return drive(_result(inv, ref))


@guarded_async
async def result_async(inv: Invocation, ref: ChildRef) -> Any:
    """:func:`result` in an ``async def`` workflow: its store calls are made off the run's
    loop. Tasks awaiting one child take turns: the first records its end, the others find
    it recorded."""
    async with _calls(inv).ends.setdefault(ref.position, asyncio.Lock()):
        return await drive_async(inv, _result(inv, ref))


@guarded
def cancel(inv: Invocation, ref: ChildRef) -> None:
    """Cancel the child ``ref`` (its compensations run) and journal that the parent did, so
    a replay does not cancel it again; its ``result`` then raises ``WorkflowCancelled``
    (unless it had ended before)."""
    inv.check_alive()
    position, name = inv.next_position(), f"cancel {ref.name}"
    if inv.lookup(position, EntryKind.CHILD, name) is not None:
        return
    inv.recovering = False
    runtime = inv.runtime
    now = runtime.clock.time()
    error = ErrorRecord(
        ErrorType.WORKFLOW_CANCELLED,
        f"run {ref.workflow_id!r} was cancelled by its parent {inv.workflow_id!r}",
    )
    by = f"parent {inv.workflow_id}"
    note = Entry.operator(
        "cancel", now, by=by, input=runtime.codec.encode({"parent": inv.workflow_id})
    )
    with inv.journaling():
        verdict = runtime.store.cancel_run(ref.workflow_id, now=now, error=error, entry=note)
        if verdict == "cancelled":
            cancel_children(runtime, ref.workflow_id, by=by)
    output = runtime.codec.encode({"cancelled": ref.workflow_id, "verdict": verdict})
    inv.append(
        Entry(
            kind=EntryKind.CHILD,
            name=name,
            status=EntryStatus.COMPLETED,
            seq=inv.alloc_seq(),
            position=position,
            attempt=1,
            started_at=now,
            finished_at=now,
            input=runtime.codec.encode({"cancel": ref.workflow_id}),
            output=output,
        )
    )
    runtime.wakeup.set()
    log.info("run %s: cancelled its child %s: %s", inv.workflow_id, ref.workflow_id, verdict)


def _settle(inv: Invocation, rec: Recorded, ref: ChildRef, row: RunRow) -> Flow[Recorded]:
    """Journal how the child ended, at its start's position, while the parent is held."""
    runtime = inv.runtime
    now = runtime.clock.time()
    if row.status == RunStatus.COMPLETED:
        stored = None
        if row.output is not None:
            stored = yield functools.partial(_read, inv, runtime.store.load_payload, row.output)
        value = None if stored is None else runtime.codec.decode(stored)
        output = runtime.codec.encode({"workflow_id": ref.workflow_id, "result": value})
        status, error = EntryStatus.COMPLETED, None
    else:
        cancelled = row.status == RunStatus.CANCELLED
        output = runtime.codec.encode({"workflow_id": ref.workflow_id, "cancelled": cancelled})
        status = EntryStatus.FAILED
        error = (
            ErrorRecord.from_json(row.error, runtime.codec.opener)
            if row.error
            else ErrorRecord(
                ErrorType.WORKFLOW_CANCELLED if cancelled else "Error", f"child run {row.status}"
            )
        )
    yield functools.partial(
        inv.append,
        Entry(
            kind=EntryKind.CHILD,
            name=rec.name,
            status=status,
            seq=rec.seq,
            position=rec.position,
            attempt=1,
            started_at=now,
            finished_at=now,
            output=output,
            error=error,
        ),
    )
    inv.recovering = False
    settled = Recorded(rec.seq, rec.position, EntryKind.CHILD, rec.name, status, 1, output, error)
    inv.recorded[rec.position] = settled
    return settled


def _outcome(inv: Invocation, rec: Recorded) -> dict[str, Any]:
    value = None if rec.output is None else inv.load_value(rec)
    if not isinstance(value, dict):
        raise inv.corrupt(rec, f"the recorded child outcome {value!r} is not one")
    return value


def _value(inv: Invocation, rec: Recorded, ref: ChildRef) -> Any:
    value = _outcome(inv, rec).get("result")
    wf = inv.runtime.registry.workflows.get(ref.name)
    return wf.restore(value) if wf is not None and wf.restore is not None else value


def _failure(inv: Invocation, rec: Recorded, ref: ChildRef) -> Exception:
    error = rec.error or ErrorRecord("Error", "the child run failed")
    if _outcome(inv, rec).get("cancelled"):
        return WorkflowCancelled(f"child run {ref.workflow_id!r} was cancelled: {error.message}")
    return WorkflowFailed(ref.workflow_id, error.type or "Error", error.message)


def cancel_children(runtime: Runtime, parent_id: str, *, by: str) -> bool:
    """Cancel the unfinished descendants of ``parent_id``; ``True`` if there were any.

    A child cancelled at once, having nothing to undo, has its own children cancelled here
    too, and so does one already cancelled (a cancel that stopped before its children is
    finished this way); one that must roll back first cancels them when its holder processes
    the cancel."""
    found = False
    for child in runtime.store.child_runs(parent_id, attached=True):
        if child.status == RunStatus.CANCELLED:
            found = cancel_children(runtime, child.workflow_id, by=by) or found
            continue
        if child.status in TERMINAL or child.cancel_requested:
            continue
        now = runtime.clock.time()
        error = ErrorRecord(
            ErrorType.WORKFLOW_CANCELLED,
            f"run {child.workflow_id!r} was cancelled with its parent {parent_id!r}",
        )
        entry = Entry.operator(
            "cancel", now, by=by, input=runtime.codec.encode({"parent": parent_id})
        )
        verdict = runtime.store.cancel_run(child.workflow_id, now=now, error=error, entry=entry)
        log.info("run %s: cancel with its parent %s: %s", child.workflow_id, parent_id, verdict)
        found = found or verdict != "finished"
        if verdict == "cancelled":
            cancel_children(runtime, child.workflow_id, by=by)
    runtime.wakeup.set()
    return found


def _through(row: RunRow) -> int | None:
    try:
        return failed_through(ErrorRecord.from_json(row.error)) if row.error else None
    except ValueError:
        return None  # the retry of the child reads it again, and says so


def _child_id(runtime: Runtime, stored: bytes | None) -> str | None:
    value = None if stored is None else runtime.codec.decode(runtime.store.load_payload(stored))
    child_id = value.get("workflow_id") if isinstance(value, dict) else None
    return child_id if isinstance(child_id, str) else None


def _task_of(position: str) -> str:
    """The task path of a position: ``"t0.3"`` -> ``"t0."``, ``"3"`` -> ``""``."""
    head, dot, _ = position.rpartition(".")
    return head + dot


def failed_through(error: ErrorRecord) -> int | None:
    """The journal seq of the call whose final failure a failed run ended with (it reached
    the top of the workflow), as its error record says."""
    return error.seq if error.type in _FAILURES else None


_FAILURES = frozenset({"StepFailed", "WorkflowFailed", "WorkflowCancelled"})


def went_on(index: Sequence[Any], at: int, *, through: int | None = None) -> bool:
    """Whether the task that recorded row ``at``, or a task that awaits it, recorded a call
    after it: then the workflow went on from that outcome (a sibling task's later calls do
    not count, as the outcome may still be what the run failed through, and neither do the
    ``compensated`` marks a rollback wrote after the failure). The failure the run ended
    with (``through``, see :func:`failed_through`) never counts, whatever was recorded
    after it: an awaiting task's call may have been made while the failing one still ran."""
    if index[at].seq == through:
        return False
    task = _task_of(index[at].position)
    return any(
        task.startswith(_task_of(row.position)) and row.status != EntryStatus.COMPENSATED
        for row in index[at + 1 :]
    )


def retry_children(
    runtime: Runtime,
    parent_id: str,
    plan: Callable[[RunRow], list[Entry]],
    *,
    through: int | None = None,
) -> tuple[list[ChildRedrive], list[Entry]]:
    """Plan the redrive of the failed and cancelled children of a parent being retried,
    each with the entries ``plan`` gives it (their own children first), and the parent's
    entries that reopen its waits on the children it failed through. Nothing is written:
    the retry writes it all in one transaction (``store.redrive(..., children=...)``).

    A failure the parent recorded and then went on from (it caught it: its task, or a task
    awaiting it, made a later call) stays as it is, child and record, or a replay of the
    retried parent would take another path than the one its journal holds; so does the
    failure of a run that is not its child (a fork's copy of its source's record). A child
    whose end the parent never recorded (cancelled when the parent failed) is redriven, and
    so is the child whose failure the parent ended with (``through``, its seq)."""
    now = runtime.clock.time()
    index = runtime.store.replay_index(parent_id)
    attached = runtime.store.child_runs(parent_id, attached=True)
    children = {child.workflow_id: child for child in attached}
    latest: dict[str, int] = {}
    for at, row in enumerate(index):
        latest[row.position] = at
    retried: set[str] = set()
    reopen = []
    for at in latest.values():
        row = index[at]
        if row.kind != EntryKind.CHILD:
            continue
        if row.status == EntryStatus.SCHEDULED:
            if (child_id := _child_id(runtime, row.input)) is not None:
                retried.add(child_id)
            continue
        if row.status != EntryStatus.FAILED or went_on(index, at, through=through):
            continue
        child_id = _child_id(runtime, row.output)
        if child_id is None or child_id not in children:
            continue
        retried.add(child_id)
        reopen.append(
            Entry(
                kind=EntryKind.CHILD,
                name=row.name,
                status=EntryStatus.SCHEDULED,
                seq=row.seq,
                position=row.position,
                started_at=now,
                input=runtime.codec.encode({"workflow_id": child_id}),
            )
        )
    redrives: list[ChildRedrive] = []
    for child_id in sorted(retried):
        child = children.get(child_id)
        if child is None or child.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
            continue
        below, entries = retry_children(runtime, child_id, plan, through=_through(child))
        redrives.extend(below)
        redrives.append(ChildRedrive(child_id, parent_id, [*entries, *plan(child)]))
    return redrives, reopen


def attention_below(runtime: Runtime, row: RunRow) -> RunRow | None:
    """The descendant that run ``row`` waits on, through children waiting on children, when
    that one waits on an operator (so the run cannot end without one)."""
    for _ in range(64):  # a tree deeper than this is not waited on by ``app.run`` in a loop
        waiting = row.waiting_for or ""
        if row.status != RunStatus.SUSPENDED or not waiting.startswith("child:"):
            return None
        child = runtime.store.get_run(waiting[len("child:") :])
        if child is None or child.status == RunStatus.NEEDS_ATTENTION:
            return child
        row = child
    return None
