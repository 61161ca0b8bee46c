"""One invocation of a run: the replay cursor, journal positions and recorded values.

A position names a call by where it happens, not when it finished: the n-th journaled call of
a task is ``"<task path>n"``, the main task's path is empty and the k-th task created by a task
with path ``p`` has path ``p + "t<k>."``. Replay therefore finds the same record for the same
call however the first run's concurrent steps interleaved.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as _dt
import functools
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from .._errors import (
    CorruptRecord,
    EncryptionKeyMissing,
    EngineError,
    NonDeterminismError,
    StalwartError,
)
from .._hooks import RunHooks
from .._model import EntryKind, EntryStatus, ErrorRecord
from .._runtime import Runtime
from .._signals import Abort, Cancel, EngineSignal, LeaseLost, LoopClosed, Release, Suspend
from .._store import Entry, IndexRow
from .._store.base import CursorStore
from .buffer import RunStream
from .flags import Flag
from .interrupted import LastSeen
from .journal_writes import JournalWrites

if TYPE_CHECKING:
    from .._registry import WorkflowDef

__all__ = [
    "CURRENT_RUN",
    "CURRENT_STEP",
    "Invocation",
    "Recorded",
    "StepScope",
    "defer_outcome",
    "failure_seq",
    "final_failure",
    "flush_outcomes",
    "guarded",
    "guarded_async",
    "step_key",
    "take_outcomes",
]

log = logging.getLogger("stalwart")
P = ParamSpec("P")
T = TypeVar("T")

_RECORDED_TYPES: dict[str, type] = {"now": _dt.datetime, "uuid": uuid.UUID, "random": float}


@dataclass(slots=True)
class Recorded:
    """The latest journal state of one position."""

    seq: int
    position: str
    kind: str
    name: str
    status: str
    attempt: int
    output: bytes | None
    error: ErrorRecord | None
    input: bytes | None = None


def step_key(workflow_id: str, position: str, suffix: str = "") -> str:
    """The idempotency key of the call at ``position`` of run ``workflow_id``; ``suffix`` is
    ``"/undo"`` for the call's compensation. Positions count from 0 (seqs from 1); the form
    never changes, since a new one would repeat the effects of runs in flight."""
    return f"{workflow_id}/{position}{suffix}"


@dataclass(slots=True)
class StepScope:
    """What a running step attempt can ask about itself."""

    invocation: Invocation
    name: str
    seq: int
    position: str
    attempt: int
    last_beat: float = 0.0
    suffix: str = ""
    usage: dict[str, Any] = field(default_factory=dict)  # what record_usage() added
    span: Any = None  # the observers' token for this attempt, until its outcome is recorded
    started_at: float = 0.0

    def __post_init__(self) -> None:
        if not self.started_at:  # the caller's reading of the clock, or now
            self.started_at = self.invocation.runtime.clock.time()
        self.invocation.current_step = self  # the lease keeper publishes it for operators

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and recoveries: the run id and the call's position (and
        ``/undo`` for the step's compensation, a different request downstream)."""
        return step_key(self.invocation.workflow_id, self.position, self.suffix)


CURRENT_RUN: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "stalwart_run", default=None
)
CURRENT_STEP: contextvars.ContextVar[StepScope | None] = contextvars.ContextVar(
    "stalwart_step", default=None
)


# The statuses each kind of positioned journal row can have; anything else is damage. A fork's
# copy of a row it reuses is "reused".
_WAIT_STATUSES = frozenset({EntryStatus.SCHEDULED, EntryStatus.COMPLETED, EntryStatus.REUSED})
_VALUE_STATUSES = frozenset({EntryStatus.COMPLETED, EntryStatus.REUSED})
_STATUSES: dict[str, frozenset[EntryStatus]] = {
    EntryKind.STEP: frozenset(EntryStatus),
    EntryKind.SLEEP: _WAIT_STATUSES,
    EntryKind.EVENT: _WAIT_STATUSES,
    EntryKind.APPROVAL: _WAIT_STATUSES,
    EntryKind.NOW: _VALUE_STATUSES,
    EntryKind.UUID: _VALUE_STATUSES,
    EntryKind.RANDOM: _VALUE_STATUSES,
    EntryKind.PATCH: _VALUE_STATUSES,
    EntryKind.CHILD: frozenset(
        {EntryStatus.SCHEDULED, EntryStatus.COMPLETED, EntryStatus.FAILED, EntryStatus.REUSED}
    ),
    EntryKind.SHARED: _VALUE_STATUSES,
    EntryKind.SEND: frozenset({EntryStatus.COMPLETED, EntryStatus.FAILED, EntryStatus.REUSED}),
}


def _damage(row: IndexRow) -> str | None:
    """What is wrong with a positioned journal row replay would read, if anything."""
    statuses = _STATUSES.get(row.kind) if isinstance(row.kind, str) else None
    if statuses is None:
        return f"the recorded kind {row.kind!r} is not one stalwart writes"
    if row.status not in statuses:
        return f"the recorded status {row.status!r} is not one a {row.kind} row can have"
    attempt = row.attempt
    if attempt is not None and (type(attempt) is not int or attempt < 0):
        return f"the recorded attempt {attempt!r} is not a count"
    if row.kind == EntryKind.STEP and row.status == EntryStatus.FAILED and row.error is None:
        return "the failed step has no recorded error"
    return None


def guarded(fn: Callable[Concatenate[Invocation, P], T]) -> Callable[Concatenate[Invocation, P], T]:
    """An engine entry point called from workflow code: what it raises on purpose (a signal or
    a ``StalwartError``) passes, anything else is the engine's own fault."""

    @functools.wraps(fn)
    def wrapper(inv: Invocation, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(inv, *args, **kwargs)
        except (EngineSignal, StalwartError):
            raise
        except Exception as exc:
            raise inv.engine_fault(exc) from exc

    return wrapper


def guarded_async(
    fn: Callable[Concatenate[Invocation, P], Awaitable[T]],
) -> Callable[Concatenate[Invocation, P], Awaitable[T]]:
    """:func:`guarded` for an ``async def`` entry point."""

    @functools.wraps(fn)
    async def wrapper(inv: Invocation, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(inv, *args, **kwargs)
        except (EngineSignal, StalwartError):
            raise
        except Exception as exc:
            raise inv.engine_fault(exc) from exc

    return wrapper


# What a divergence with unchanged code means (a replay that took another branch).
_SAME_CODE = (
    ". If the code did not change, it branched on something the journal does not hold (the"
    " wall clock, a timeout around a call, the environment): read it with stalwart.now() or"
    " in a step, then retry"
)


class Invocation(JournalWrites):
    """State of one execution of a run, from the top of the workflow function."""

    writes_streams = True  # a dry replay's (``stalwart check``) emits write nothing

    def __init__(
        self,
        runtime: Runtime,
        wf: WorkflowDef,
        workflow_id: str,
        owner: str,
        *,
        recovering: bool,
        index: list[IndexRow],
    ) -> None:
        self.runtime = runtime
        self.store: CursorStore = runtime.store  # the cursor's own calls stay inside its role
        self.wf = wf
        self.workflow_id = workflow_id
        self.owner = owner
        self.recovering = recovering
        self.is_async = wf.is_async
        self.recorded: dict[str, Recorded] = {}
        self.damaged: dict[str, str] = {}  # position -> why its latest row cannot be read
        self.spend: Any = None  # what the run has used, read when its budget is first checked
        self.current_step: StepScope | None = None  # the attempt that started last, until settled
        self.observe: RunHooks | None = None  # the observers' hooks of this execution
        for row in index:
            problem = _damage(row)
            try:
                error = _error_of(row.error, self.runtime.codec.opener)
            except ValueError as exc:
                problem, error = problem or str(exc), None
            if problem is None:
                self.damaged.pop(row.position, None)
            else:
                self.damaged[row.position] = problem
            self.recorded[row.position] = Recorded(
                row.seq,
                row.position,
                row.kind,
                row.name,
                EntryStatus.COMPLETED if row.status == EntryStatus.REUSED else row.status,
                row.attempt or 0,
                row.output,
                error,
                row.input,
            )
        self.unvisited = set(self.recorded)
        self.next_seq = max((r.seq for r in self.recorded.values()), default=0) + 1
        self.counters: dict[str, int] = {}
        self.task_paths: dict[asyncio.Task[Any], str] = {}
        self.children: dict[str, int] = {}
        self.patch_sites: dict[str, tuple[str, int, int, int]] = {}  # id -> its call site
        self.fatal: Abort | None = None
        self.lease_lost = Flag()  # the stop signals: set by other threads, never waited on
        self.cancel_requested = Flag()
        self.deadline: float | None = None
        self.retrying: str | None = None  # the run's last begun retry, "seq:attempt"
        self.last_seen: LastSeen | None = None  # a recovery: the attempt its holder ran
        self.suspended: Suspend | None = None
        self.releasing = Flag()
        self.in_flight = 0
        self.abandoned = False  # ended without an outcome; its lease was given back
        self.final_failures: dict[int, tuple[BaseException, int]] = {}  # see final_failure
        self.loop: asyncio.AbstractEventLoop | None = None  # where its async code runs
        self.caller_gone: threading.Event | None = None  # set: run_async's caller gave up
        self.loop_closed: LoopClosed | None = None  # see lost_loop
        self.deferring = False  # while a sync workflow's own code runs (``defer_outcome``)
        # Whether the run's end may have a parent to wake or approvals to close: not for a
        # run this invocation created (a top-level run) until it opens an approval.
        self.ties = True
        self.deferred: list[Entry] = []
        # What ``rollback_in_progress`` said, when it was read with the index (a claim's).
        self.rollback_known = False
        self.rollback: bytes | None = None
        self.lost_outcomes: list[Entry] = []  # deferred outcomes a lost lease kept out
        self.stream: RunStream | None = None  # its emitted chunks not written yet
        self._lock = threading.Lock()

    # -- positions ------------------------------------------------------------------------

    def _task_path(self) -> str:
        if not self.is_async:
            return ""
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return ""
        return self.task_paths.get(task, "") if task is not None else ""

    def next_position(self) -> str:
        """The position of the next journaled call in the current task."""
        path = self._task_path() if self.is_async else ""
        with self._lock:
            n = self.counters.get(path, 0)
            self.counters[path] = n + 1
        return f"{path}{n}"

    def peek_position(self) -> str:
        """The position :meth:`next_position` would return now, without taking it (``patched``
        takes it only when the run records the patch there)."""
        path = self._task_path()
        with self._lock:
            return f"{path}{self.counters.get(path, 0)}"

    def adopt_task(self, task: asyncio.Task[Any], *, parent: asyncio.Task[Any] | None) -> None:
        """Give a task that workflow code created its path: its place among its parent's
        children (the task factory calls this as the task is created)."""
        if parent is None or parent not in self.task_paths:
            return
        path = self.task_paths[parent]
        k = self.children.get(path, 0)
        self.children[path] = k + 1
        self.task_paths[task] = f"{path}t{k}."

    def alloc_seq(self) -> int:
        """A fresh journal sequence number for a call replay has not seen."""
        with self._lock:
            seq = self.next_seq
            self.next_seq += 1
        return seq

    # -- replay ---------------------------------------------------------------------------

    def check_alive(self, *, flush: bool = True) -> None:
        """At a boundary: journal what the workflow went on past (``defers``; not with
        ``flush=False``); re-raise a sticky failure; stop if the lease was lost, the run was
        cancelled or its deadline passed, or another task of the run already suspended it."""
        if flush and self.defers():
            self.flush_deferred()
        if self.fatal is not None:
            raise self.fatal
        if self.loop_closed is not None:
            raise self.loop_closed
        if self.lease_lost.is_set():
            raise LeaseLost()
        if self.suspended is not None:
            raise self.suspended
        if self.releasing.is_set():
            raise Release()
        if self.cancel_requested.is_set():
            raise Cancel("it was cancelled")  # by app.cancel, or with its parent
        if self.deadline is not None and self.runtime.clock.time() >= self.deadline:
            raise Cancel("its deadline passed")

    def suspend(self, *, wake_at: float | None, waiting_for: str | None) -> Suspend:
        """The signal that unwinds the run; sticky, so code that catches it cannot go on."""
        self.suspended = Suspend(wake_at=wake_at, waiting_for=waiting_for)
        return self.suspended

    def abort(self, error: Exception, *, attention: bool) -> Abort:
        """Make ``error`` sticky: every later call in this invocation raises it again."""
        self.fatal = Abort(error, attention=attention)
        return self.fatal

    def engine_fault(self, error: Exception) -> Abort:
        """The engine's own bookkeeping raised ``error`` (not workflow code, not a store
        outage): the run goes to ``needs_attention`` with reason type ``EngineError``."""
        log.error(
            "run %s: stalwart's bookkeeping failed: %s: %s",
            self.workflow_id,
            type(error).__name__,
            error,
            exc_info=error,
        )
        fault = EngineError(
            f"run {self.workflow_id!r}: stalwart's own bookkeeping failed with "
            f"{type(error).__name__}: {error}; this is a stalwart bug, not the workflow's "
            "failure (please report it); app.retry() tries the run again"
        )
        return self.abort(fault, attention=True)

    def lookup(self, position: str, kind: str, name: str) -> Recorded | None:
        """The record at ``position``, after checking it is the call the code makes now."""
        rec = self.recorded.get(position)
        if rec is None:
            return None
        self.unvisited.discard(position)
        if position in self.damaged:
            raise self.corrupt(rec, self.damaged[position])
        if rec.kind != kind or rec.name != name:
            error = NonDeterminismError(
                f"run {self.workflow_id!r} diverged from its journal at seq {rec.seq}: the "
                f"journal recorded {rec.kind} {rec.name!r} there, the code now asks for {kind} "
                f"{name!r}. Deploy code that makes the same calls in the same order (or fork "
                "the run from before this point), then retry the run" + _SAME_CODE,
                seq=rec.seq,
                recorded=rec.name,
                requested=name,
            )
            raise self.abort(error, attention=True)
        return rec

    def check_fully_replayed(self) -> None:
        """After the workflow ended: every recorded call must have been made again."""
        if not self.unvisited:
            return
        rec = min((self.recorded[p] for p in self.unvisited), key=lambda r: r.seq)
        error = NonDeterminismError(
            f"run {self.workflow_id!r} diverged from its journal at seq {rec.seq}: the journal "
            f"recorded {rec.kind} {rec.name!r} there, but the code ended without calling it. "
            "Deploy code that makes the same calls in the same order, then retry the run"
            + _SAME_CODE,
            seq=rec.seq,
            recorded=rec.name,
            requested=None,
        )
        raise self.abort(error, attention=True)

    def corrupt(self, rec: Recorded, problem: str) -> Abort:
        """Abort the run: the journal row of ``rec`` cannot be read (``problem`` says why)."""
        error = CorruptRecord(
            f"run {self.workflow_id!r}, seq {rec.seq} ({rec.kind} {rec.name!r}): {problem}; "
            "restore the row from a backup or fork the run from before this seq",
            workflow_id=self.workflow_id,
            seq=rec.seq,
        )
        return self.abort(error, attention=False)

    def decode_recorded(self, rec: Recorded, label: str, stored: bytes) -> Any:
        """A stored payload of ``rec``, decoded; a bad one aborts with ``CorruptRecord``."""
        return _decode_recorded(self, rec, label, stored)

    def load_value(self, rec: Recorded) -> Any:
        """The recorded output of ``rec``, decoded; a bad row aborts with ``CorruptRecord``."""
        if rec.output is None:
            return None
        return self.decode_recorded(rec, "output", rec.output)

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop:
        """Where this invocation's async code runs: the caller's loop for ``run_async``, else
        the app's one loop."""
        if self.loop is not None:
            return self.loop
        try:
            return self.runtime.loop.loop
        except RuntimeError:  # the app closed it
            raise self.lost_loop("the app closed its event loop") from None

    def lost_loop(self, why: str) -> LoopClosed:
        """The signal that gives the run back as its loop closes; sticky, as ``suspend``'s."""
        self.loop_closed = LoopClosed(why)
        return self.loop_closed

    @guarded
    def record_value(self, kind: EntryKind, produce: Any) -> Any:
        """A value recorded once (``now``, ``uuid4``, ``random``) and replayed identically.
        An async workflow's waits for its next boundary (``flush_async`` at a step, a wait, a
        child; any other journaled call; the run's end), so that its loop does not wait for
        the database: nothing that leaves a trace happens before the value is journaled."""
        self.check_alive(flush=not self.is_async)  # (values need not wait for values)
        position = self.next_position()
        rec = self.lookup(position, kind, kind)
        if rec is not None:
            value = self.load_value(rec)
            if not isinstance(value, _RECORDED_TYPES[kind]):
                raise self.corrupt(rec, f"the recorded {kind} {value!r} is not a {kind} value")
            return value
        self.recovering = False
        value = produce()
        payload = self.runtime.codec.encode(value)
        now = self.runtime.clock.time()
        entry = Entry(
            kind=kind,
            name=kind,
            status=EntryStatus.COMPLETED,
            seq=self.alloc_seq(),
            position=position,
            attempt=1,
            started_at=now,
            finished_at=now,
            output=payload,
        )
        if self.is_async:
            self.deferred.append(entry)
        else:
            self.append(entry)
        return self.runtime.codec.decode(payload)


def _decode_recorded(inv: Invocation, rec: Recorded, label: str, stored: bytes) -> Any:
    try:
        with inv.journaling():
            payload = inv.store.load_payload(stored)
        return inv.runtime.codec.decode(payload)
    except EncryptionKeyMissing as exc:  # named: the run and the seq
        raise exc.at(inv.workflow_id, rec.seq) from None
    except (ValueError, CorruptRecord) as exc:
        raise inv.corrupt(rec, f"the recorded {label} cannot be decoded ({exc})") from exc


def _error_of(text: str | None, opener: Callable[[bytes], bytes] | None) -> ErrorRecord | None:
    """A journal row's recorded error (its sealed message opened where ``opener`` can)."""
    return None if text is None else ErrorRecord.from_json(text, opener)


def defer_outcome(inv: Invocation, entry: Entry) -> None:
    """Journal a step's outcome with ``inv``'s next write, or now.

    While a sync workflow's own code runs (``inv.deferring``), the outcome waits for the next
    boundary (``check_alive``: before another step's attempt, a wait, a recorded value, a
    child) or for the transaction that ends the run, which takes it along (``take_outcomes``):
    the code between two calls runs ahead of the commit, but nothing that leaves a trace
    does, so a crash before the commit loses only what replay does again anyway. A run that
    ends after its last step so commits twice in all: created, then ended."""
    if inv.deferring:
        inv.deferred.append(entry)
    else:
        inv.append(entry)


def take_outcomes(inv: Invocation) -> list[Entry]:
    """The deferred outcomes, for the transaction that ends the run to journal."""
    return inv.take_deferred()


def flush_outcomes(inv: Invocation) -> None:
    """Journal the deferred outcomes now (``LeaseLost`` if the lease is gone)."""
    inv.flush_deferred()


_E = TypeVar("_E", bound=BaseException)


def final_failure(inv: Invocation, error: _E, seq: int) -> _E:
    """``error``, the exception a call's final failure (journal ``seq``) raises in the
    workflow: a run that fails with it failed through that call, and its retry reopens it."""
    inv.final_failures[id(error)] = (error, seq)
    return error


def failure_seq(inv: Invocation, error: BaseException) -> int | None:
    """The journal seq of the call whose final failure ``error`` is, if it is one."""
    known = inv.final_failures.get(id(error))
    return known[1] if known is not None and known[0] is error else None
