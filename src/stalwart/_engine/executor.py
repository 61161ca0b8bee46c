"""Execute one invocation of a run until it completes, fails or needs an operator."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._errors import CorruptRecord, SerializationError, StoreError, WorkflowCancelled
from .._model import (
    EntryKind,
    EntryStatus,
    ErrorRecord,
    ErrorType,
    OutcomeKind,
    RunStatus,
    from_epoch,
)
from .._runtime import Runtime
from .._serde import UnsupportedValue
from .._signals import (
    Abort,
    Cancel,
    InDoubt,
    LeaseLost,
    LoopClosed,
    Release,
    StoreFailed,
    Suspend,
)
from .._store import Entry
from .._store.sealed import is_kept_apart
from .children import cancel_children
from .compensation import CompensationFailed, pending_compensations, run_compensations
from .invocation import (
    Invocation,
    failure_seq,
    flush_outcomes,
    take_outcomes,
)
from .lifecycle import lifecycle
from .observe import finished, suspended
from .streams import flush_stream
from .workflow_body import Unwound, main_task, run_async, run_sync

if TYPE_CHECKING:
    pass

__all__ = ["Offload", "Outcome", "execute", "execute_async", "rollback_state"]

log = logging.getLogger("stalwart")
T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """How an invocation ended. ``error`` is set for ``abort`` (corrupt record)."""

    status: OutcomeKind
    error: Exception | None = None
    output: bytes | None = None  # an ended run's encoded result, as recorded
    record: str | None = None  # an ended run's error record, as recorded


def _decode_input(
    runtime: Runtime, workflow_id: str, stored: bytes | None
) -> tuple[list[Any], dict[str, Any]]:
    try:
        value = (
            runtime.codec.decode(runtime.store.load_payload(stored)) if stored is not None else None
        )
    except (ValueError, CorruptRecord) as exc:
        raise CorruptRecord(
            f"run {workflow_id!r}: its recorded input cannot be decoded ({exc})",
            workflow_id=workflow_id,
        ) from exc
    args = value.get("args", []) if isinstance(value, dict) else None
    kwargs = value.get("kwargs", {}) if isinstance(value, dict) else None
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise CorruptRecord(
            f"run {workflow_id!r}: its recorded input is not an argument record; restore the "
            "row from a backup",
            workflow_id=workflow_id,
        )
    return args, kwargs


def rollback_state(runtime: Runtime, workflow_id: str, stored: bytes) -> tuple[str, ErrorRecord]:
    """How the interrupted rollback ends the run, from its ``rolling_back`` entry."""
    try:
        state = runtime.codec.decode(stored)
    except ValueError as exc:
        raise CorruptRecord(
            f"run {workflow_id!r}: its rolling_back entry cannot be decoded ({exc}); restore "
            "the row from a backup, then retry the run",
            workflow_id=workflow_id,
        ) from exc
    then = state.get("then") if isinstance(state, dict) else None
    detail = state.get("detail") if isinstance(state, dict) else None
    record = _record_of(detail)
    if then not in (RunStatus.FAILED, RunStatus.CANCELLED) or record is None:
        raise CorruptRecord(
            f"run {workflow_id!r}: its rolling_back entry {state!r} does not say how the run "
            "ends; restore the row from a backup, then retry the run",
            workflow_id=workflow_id,
        )
    return then, record


def _record_of(detail: object) -> ErrorRecord | None:
    """The error a ``rolling_back`` entry ends the run with; a plain text is its message."""
    if not isinstance(detail, str):
        return None
    try:
        return ErrorRecord.from_json(detail)
    except ValueError:
        return ErrorRecord("Error", detail)


class Offload(Protocol):
    """Runs ``fn(*args)`` in a thread and awaits what it returns, to its end: a cancellation
    of the awaiting task meanwhile waits for the thread too (it records the run's outcome)."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


async def execute_async(
    runtime: Runtime, inv: Invocation, stored_input: bytes | None, offload: Offload
) -> Outcome:
    """``execute`` of an async workflow's run as the current task, on the app's loop.

    The workflow runs in this task, and a run that completes is ended by a write this task
    awaits: neither takes a thread. Every other ending (a failure, a wait, a cancellation, a
    lost lease, a rollback to finish) is recorded by ``execute`` itself, in a thread
    (``offload``), from what the workflow returned or raised here."""
    if not ((inv.rollback_known or not inv.recorded) and inv.rollback is None) or (
        stored_input is not None and is_kept_apart(stored_input)
    ):  # a store read first: all of it in a thread
        return await offload(execute, runtime, inv, stored_input)
    try:
        args, kwargs = _decode_input(runtime, inv.workflow_id, stored_input)
    except CorruptRecord:
        return await offload(execute, runtime, inv, stored_input)
    task = asyncio.current_task()
    asked = 0 if task is None else task.cancelling()
    try:
        ended = await main_task(inv, inv.wf, args, kwargs)
        if task is not None and task.cancelling() > asked and not runtime.loop.closing:
            await asyncio.sleep(0)  # a cancellation of this task it asked for, not delivered
    except asyncio.CancelledError as exc:
        if runtime.loop.closing:
            raise  # the app's loop closes, cancelling its tasks: the caller gives the run back
        # The workflow's own (it cancelled a task it awaited, or its own): as ``run_on``
        # reported it, a failure of the run.
        failed = concurrent.futures.CancelledError(*exc.args)
        return await offload(execute, runtime, inv, stored_input, _raising(failed))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the workflow's error, or an engine signal
        return await offload(execute, runtime, inv, stored_input, _raising(exc))
    if isinstance(ended, Unwound):
        return await offload(execute, runtime, inv, stored_input, _raising(ended.signal))
    try:
        ending = _completed(runtime, inv, ended)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # anything but a plain completion: as execute decides it
        ending = None
    if ending is None:
        return await offload(execute, runtime, inv, stored_input, lambda: ended)
    try:
        return await _complete(runtime, inv, *ending)
    except StoreError:
        raise
    except Exception as exc:  # as ``execute`` does
        return await offload(_engine_fault, runtime, inv, exc)


async def _complete(
    runtime: Runtime, inv: Invocation, now: float, payload: bytes, entry: Entry
) -> Outcome:
    """``_finish`` of a run that completed with ``payload``, awaiting its commit."""
    ok = await runtime.store.finish_run_async(
        inv.workflow_id,
        owner=inv.owner,
        status=RunStatus.COMPLETED,
        output=payload,
        error=None,
        now=now,
        entry=entry,
        ties=inv.ties,
    )
    return _ended(
        runtime,
        inv,
        ok,
        status=RunStatus.COMPLETED,
        output=payload,
        text=None,
        exc=None,
        charged=[],
    )


def _raising(error: BaseException) -> Callable[[], Any]:
    def ran() -> Any:
        raise error

    return ran


def _completed(runtime: Runtime, inv: Invocation, value: Any) -> tuple[float, bytes, Entry] | None:
    """The end of a run whose workflow returned ``value``, when it plainly completes (what it
    ends with: when, its result and its entry); ``None`` when ``_execute`` must decide
    (as when entries wait to be journaled: its thread does, not the loop)."""
    inv.check_alive(flush=False)
    inv.check_fully_replayed()
    if inv.defers() or (inv.stream is not None and inv.stream.has_pending()):
        return None
    payload = runtime.codec.encode(value)
    if inv.wf.restore is not None:
        inv.wf.restore(runtime.codec.decode(payload))
    now = runtime.clock.time()
    return now, payload, Entry.ended(RunStatus.COMPLETED, now, output=payload, error=None)


def execute(
    runtime: Runtime,
    inv: Invocation,
    stored_input: bytes | None,
    ran: Callable[[], Any] | None = None,
) -> Outcome:
    """Run the workflow from the top; record how it ended unless the lease was lost.
    ``ran``: the workflow already ran (``execute_async``), and returns or raises as it did.

    An exception of the engine's own bookkeeping (not of workflow code, not a store outage,
    which the caller handles by releasing the lease) sends the run to an operator."""
    try:
        return _execute(runtime, inv, stored_input, ran)
    except LoopClosed as signal:  # (also from a rollback begun for another reason)
        wid = inv.workflow_id
        given_back = f"run {wid!r}: {signal}: a worker, or the next app.run of it, takes it up"
        return _leave(runtime, inv, RuntimeError(given_back))  # (its caller logs it)
    except StoreError:
        raise
    except Exception as exc:
        return _engine_fault(runtime, inv, exc)


def _engine_fault(runtime: Runtime, inv: Invocation, exc: Exception) -> Outcome:
    """The run goes to an operator: stalwart's own bookkeeping raised ``exc``."""
    fault = inv.engine_fault(exc).error
    detail = ErrorRecord.of(fault, reason=str(fault))
    return _finish(runtime, inv, RunStatus.NEEDS_ATTENTION, output=None, error=detail, exc=fault)


def _execute(
    runtime: Runtime, inv: Invocation, stored_input: bytes | None, ran: Callable[[], Any] | None
) -> Outcome:
    wf, wid = inv.wf, inv.workflow_id
    try:
        if ran is None:
            begun = _begin(runtime, inv, stored_input)
            if isinstance(begun, Outcome):
                return begun
            ran = begun
        try:
            value = ran()
        except Exception as exc:
            inv.check_alive()  # a swallowed signal still wins over the code's own ending
            inv.check_fully_replayed()
            # A call's final failure the run fails with: its seq, which a retry reopens.
            detail = ErrorRecord.of(exc, seq=failure_seq(inv, exc))
            return _roll_back(runtime, inv, RunStatus.FAILED, detail, exc)
        inv.check_alive()
        inv.check_fully_replayed()
        try:
            payload = runtime.codec.encode(value)
            if wf.restore is not None:  # what Handle.result will rebuild must fit
                wf.restore(runtime.codec.decode(payload))
        except UnsupportedValue as exc:
            error = SerializationError(
                f"workflow {wf.name!r} (run {wid!r}) returned a value of type {exc.type_name} "
                f"at {exc.path.replace('value', 'result', 1)}, which cannot be stored; return "
                "JSON-compatible values (or opt in with serializer='pickle')"
            )
            return _finish(
                runtime, inv, RunStatus.FAILED, output=None, error=ErrorRecord.of(error), exc=error
            )
        except SerializationError as exc:
            return _finish(
                runtime, inv, RunStatus.FAILED, output=None, error=ErrorRecord.of(exc), exc=exc
            )
        return _finish(runtime, inv, RunStatus.COMPLETED, output=payload, error=None, exc=None)
    except Abort as signal:
        if signal.attention:
            reason = str(signal.error)
            detail = ErrorRecord.of(signal.error, reason=reason)
            return _finish(
                runtime, inv, RunStatus.NEEDS_ATTENTION, output=None, error=detail, exc=signal.error
            )
        return _corrupt(runtime, inv, signal.error)
    except CorruptRecord as exc:
        return _corrupt(runtime, inv, exc)
    except Suspend as signal:
        # inv.suspended keeps the signal, and its traceback the run's frames, which hold inv:
        # a cycle per suspended run (with all it refers to) that only the collector frees.
        signal.__traceback__ = signal.__context__ = None  # (what it interrupted holds them too)
        return _flushed(runtime, inv) or _suspend(runtime, inv, signal)
    except Cancel as signal:
        detail = ErrorRecord.of(WorkflowCancelled(f"run {wid!r} stopped: {signal}"))
        return _roll_back(runtime, inv, RunStatus.CANCELLED, detail, None)
    except InDoubt as signal:
        detail = ErrorRecord(
            ErrorType.IN_DOUBT, signal.reason, reason=signal.reason, seq=signal.seq
        )
        log.warning("run %s: %s", wid, signal.reason)
        return _finish(runtime, inv, RunStatus.NEEDS_ATTENTION, output=None, error=detail, exc=None)
    except StoreFailed as signal:
        log.warning("run %s: the store failed while journaling: %s", wid, signal.error)
        return _leave(runtime, inv, signal.error)
    except Release:
        if (unflushed := _flushed(runtime, inv)) is not None:
            return unflushed
        runtime.store.release_run(wid, owner=inv.owner, now=runtime.clock.time())
        log.info("run %s: given back at a step boundary (worker shutting down)", wid)
        return Outcome(OutcomeKind.RELEASED)
    except LeaseLost:
        return _lease_lost(inv)


def _leave(runtime: Runtime, inv: Invocation, error: Exception) -> Outcome:
    """Stop without deciding how the run ends: what it did is journaled, its lease given
    back (both as far as the store lets), and ``error`` is what the caller sees."""
    with contextlib.suppress(Exception):
        flush_outcomes(inv)
    with contextlib.suppress(Exception):
        runtime.store.release_lease(inv.workflow_id, owner=inv.owner, now=runtime.clock.time())
    return Outcome(OutcomeKind.ABORT, error)


def _begin(
    runtime: Runtime, inv: Invocation, stored_input: bytes | None
) -> Outcome | Callable[[], Any]:
    """What runs the workflow, or how the rollback a crash interrupted ended the run."""
    wid = inv.workflow_id
    # A rollback implies recorded steps: a run that has none skips the lookup, as one whose
    # claim read it with the index does.
    if inv.rollback_known or not inv.recorded:
        pending = inv.rollback
    else:
        pending = runtime.store.rollback_in_progress(wid)
    if pending is not None:  # a rollback was interrupted: finish it, don't replay the run
        then, detail = rollback_state(runtime, wid, pending)
        return _roll_back(runtime, inv, then, detail, None, started=True)
    args, kwargs = _decode_input(runtime, wid, stored_input)
    runner = run_async if inv.wf.is_async else run_sync
    return functools.partial(runner, inv, inv.wf, args, kwargs)


def _roll_back(
    runtime: Runtime,
    inv: Invocation,
    status: str,
    detail: ErrorRecord,
    exc: BaseException | None,
    *,
    started: bool = False,
) -> Outcome:
    """Run the compensations of completed steps, then end the run as ``status``; a
    compensation that exhausts its retries sends it to an operator instead. A rollback is
    journaled before its first compensation, so a recovery finishes it instead of replaying
    the workflow (whose compensated steps would otherwise run again)."""
    if (unflushed := _flushed(runtime, inv)) is not None:
        return unflushed
    try:
        with inv.journaling():
            cancel_children(runtime, inv.workflow_id, by=f"parent {inv.workflow_id}")
            if not started and _has_compensations(runtime, inv):
                now = runtime.clock.time()
                then = runtime.codec.encode({"then": status, "detail": detail.to_json()})
                inv.append(lifecycle("rolling_back", now, output=then))
            run_compensations(runtime, inv)
    except Suspend as signal:  # a compensation's long backoff, or its breaker: a durable wait
        signal.__traceback__ = signal.__context__ = None  # as in _execute: no cycle
        # Not cut to the deadline, which started or cannot stop the rollback: a wake before
        # the retry time would only find the backoff still ahead and suspend again at once.
        return _suspend(runtime, inv, signal, until_deadline=False)
    except CompensationFailed as failure:
        reason = str(failure)
        error = ErrorRecord(
            ErrorType.COMPENSATION_FAILED, reason, reason=reason, seq=failure.seq, then=status
        )
        return _finish(
            runtime, inv, RunStatus.NEEDS_ATTENTION, output=None, error=error, exc=failure
        )
    return _finish(runtime, inv, status, output=None, error=detail, exc=exc)


def _flushed(runtime: Runtime, inv: Invocation) -> Outcome | None:
    """Journal the step outcomes the run went on past (``defer_outcome``), and write what it
    emitted, before an ending that does not take them along; the outcome to return when
    that failed."""
    try:
        flush_outcomes(inv)
        flush_stream(inv)
    except LeaseLost:
        return _lease_lost(inv)
    except StoreFailed as signal:
        log.warning("run %s: the store failed while journaling: %s", inv.workflow_id, signal.error)
        with contextlib.suppress(Exception):
            runtime.store.release_lease(inv.workflow_id, owner=inv.owner, now=runtime.clock.time())
        return Outcome(OutcomeKind.ABORT, signal.error)
    return None


# The entries of calls that ran code with effects (an async run's recorded values are
# deferred too, and ran nothing).
_RAN = frozenset({EntryKind.STEP, EntryKind.COMPENSATION})


def _lease_lost(inv: Invocation) -> Outcome:
    """Another worker took the run over: nothing more is written. Steps that ran without
    their outcome written (still running, or done but not journaled yet) are named, since
    fencing stops writes, not what a step did meanwhile."""
    unwritten = [*inv.lost_outcomes, *inv.deferred]
    ran = [e.name for e in unwritten if e.status == EntryStatus.COMPLETED and e.kind in _RAN]
    if inv.current_step is not None:
        ran.append(inv.current_step.name)
    if not ran:
        wid = inv.workflow_id
        log.warning("run %s: lease lost to another worker; stopped without writing", wid)
        return Outcome(OutcomeKind.LEASE_LOST)
    log.warning(
        "run %s: lease lost to another worker; stopped without writing; step %s ran and may have"
        " had its effect after the lease was lost: only the provider deduplicating on its"
        " stalwart.idempotency_key() prevents a duplicate",
        inv.workflow_id,
        ", ".join(ran),
    )
    return Outcome(OutcomeKind.LEASE_LOST)


def _has_compensations(runtime: Runtime, inv: Invocation) -> bool:
    rows = runtime.store.compensation_plan(inv.workflow_id)
    return bool(pending_compensations(rows, codec=runtime.codec, workflow_id=inv.workflow_id))


def _corrupt(runtime: Runtime, inv: Invocation, error: Exception) -> Outcome:
    """A record replay needs cannot be read: the run waits for an operator (it is not a crash,
    and retrying it would only fail again); the caller sees the ``CorruptRecord``."""
    seq = getattr(error, "seq", None)
    detail = ErrorRecord.of(error, reason=str(error), seq=seq)
    _finish(runtime, inv, RunStatus.NEEDS_ATTENTION, output=None, error=detail, exc=error)
    return Outcome(OutcomeKind.ABORT, error)


def _suspend(
    runtime: Runtime, inv: Invocation, signal: Suspend, *, until_deadline: bool = True
) -> Outcome:
    if (unflushed := _flushed(runtime, inv)) is not None:
        return unflushed
    wake_at = signal.wake_at
    if until_deadline and inv.deadline is not None:
        wake_at = inv.deadline if wake_at is None else min(wake_at, inv.deadline)
    now = runtime.clock.time()
    waits = {"waiting_for": signal.waiting_for or "timer", "until": from_epoch(wake_at)}
    entry = Entry.milestone(RunStatus.SUSPENDED, now, output=runtime.codec.encode(waits))
    if runtime.store.suspend_run(
        inv.workflow_id,
        owner=inv.owner,
        wake_at=wake_at,
        waiting_for=signal.waiting_for,
        now=now,
        entry=entry,
    ):
        suspended(runtime, inv, signal.waiting_for, wake_at)
        return Outcome(OutcomeKind.SUSPENDED)
    if inv.lease_lost.is_set():
        return Outcome(OutcomeKind.LEASE_LOST)
    return Outcome(OutcomeKind.WAKE)  # what it waits for arrived while it was unwinding


def _finish(
    runtime: Runtime,
    inv: Invocation,
    status: str,
    *,
    output: bytes | None,
    error: ErrorRecord | None,
    exc: BaseException | None,
) -> Outcome:
    waiting = inv.stream is not None and inv.stream.has_pending()
    if waiting and (unflushed := _flushed(runtime, inv)) is not None:
        return unflushed
    now = runtime.clock.time()
    entry = Entry.ended(status, now, output=output, error=error)
    text = None if error is None else error.to_json()
    ok = runtime.store.finish_run(
        inv.workflow_id,
        owner=inv.owner,
        status=status,
        output=output,
        error=text,
        now=now,
        entry=entry,
        charged=(charged := take_outcomes(inv)),  # the last step's outcome commits with it
        ties=inv.ties,
    )
    return _ended(
        runtime, inv, ok, status=status, output=output, text=text, exc=exc, charged=charged
    )


def _ended(
    runtime: Runtime,
    inv: Invocation,
    ok: bool,
    *,
    status: str,
    output: bytes | None,
    text: str | None,
    exc: BaseException | None,
    charged: list[Entry],
) -> Outcome:
    """How the run ended, once the write that ends it returned ``ok`` (``False``: the lease
    was lost, and ``charged`` with it)."""
    if not ok:
        inv.lost_outcomes += charged
        return _lease_lost(inv)
    finished(runtime, inv, status, text)
    runtime.note_settled()
    failure = exc if isinstance(exc, Exception) else None
    return Outcome(OutcomeKind(status), failure, output=output, record=text)
