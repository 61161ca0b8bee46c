"""Journaled step calls: replay a recorded outcome, or run attempts until one is recorded."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._errors import (
    OutputInvalid,
    SerializationError,
    StepFailed,
    StepTimeout,
    WorkflowCancelled,
)
from .._model import EntryKind, EntryStatus, ErrorRecord, Usage
from .._registry import StepDef
from .._retry import Decision
from .._serde import UnsupportedValue, argument_path
from .._signals import EngineSignal, LeaseLost
from .._store import Entry
from .._usage import attempt_usage, warn_if_unrecorded
from .attempt import DONE, count, decide, failure_record
from .attempt_loop import run_attempts, run_attempts_async
from .breakers import admit
from .budget import spend_of
from .interrupted import interrupted_span
from .invocation import (
    Invocation,
    Recorded,
    StepScope,
    defer_outcome,
    final_failure,
    guarded,
    guarded_async,
)
from .irreversible import AttemptInterrupted, check_then_act, in_doubt
from .observe import attempt_stopped
from .outputs import validate_and_encode

__all__ = ["call_step", "call_step_async"]

NO_USAGE: tuple[Usage | None, str | None] = (None, None)
CANCELLED_OR_STOPPED = (
    "its process stopped, or the workflow cancelled the call (a timeout or task group around it),"
)


def _standing(inv: Invocation, rec: Recorded | None) -> tuple[int, int, float, bool]:
    """Where a call stands by its latest journal row: its seq, the attempt it makes next, when
    that attempt may start, and whether an operator asked to run it again (``resolve
    --rerun``). A new call takes the next seq."""
    if rec is None:
        return inv.alloc_seq(), 1, 0.0, False
    if rec.status == EntryStatus.COMPENSATED:  # undone: a retry or fork runs it again
        return rec.seq, 1, 0.0, False
    if rec.status != EntryStatus.FAILED:  # completed, or an irreversible step's mark
        return rec.seq, rec.attempt, 0.0, False
    error = rec.error or ErrorRecord("Unknown")
    return rec.seq, rec.attempt + 1, float(error.retry_at or 0.0), error.rerun


class StepCall:
    """The decisions of one journaled step call, shared by the sync and async drivers."""

    def __init__(
        self,
        inv: Invocation,
        step: StepDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        awaits_journal: bool = False,
    ):
        inv.check_alive()
        self.inv = inv
        self.step = step
        self.args = args
        self.kwargs = kwargs
        self.position = inv.next_position()
        self.rec: Recorded | None = inv.lookup(self.position, "step", step.name)
        self.seq, self.attempt, self.retry_at, self.rerun = _standing(inv, self.rec)
        self.input = b""  # the encoded arguments, once the journal does not settle the call
        self.value: Any = None
        self.started_at = 0.0
        self.current: StepScope | None = None  # the attempt under way
        self.probe: str | None = None  # this attempt is its breaker's half-open probe
        self.reported = False  # this attempt's failure is already counted by its breaker
        self.policy = step.retry
        # An async call's outcome, which its driver journals awaiting the commit, so that
        # the run's loop goes on meanwhile (``call_step_async``).
        self.awaits_journal = awaits_journal
        self.unjournaled: Entry | None = None
        # An async call's other writes (a failed attempt, a retry's marker), which its driver
        # makes off the loop before going on (``journal_async``). Not an irreversible step's:
        # its ``verify`` journals what it finds itself, after the marks it reads.
        self.queues = awaits_journal and not step.irreversible
        self.writes: list[Callable[[], None]] = []
        # ``inv.check_alive()`` above is the first attempt's boundary check too, as long as
        # nothing is journaled before that attempt (a new call: see ``replay``)
        self.checked = True

    @property
    def label(self) -> str:
        """How messages name this call (only a timeout's message reads it)."""
        return f"step {self.step.name!r}"

    def replay(self) -> bool:
        """Settle the call from the journal if it can be; True when ``self.value`` is final."""
        rec = self.rec
        self.checked = rec is None
        if rec is not None and rec.status == EntryStatus.COMPLETED:
            value = self.inv.load_value(rec)
            self.value = self.step.restore(value) if self.step.restore else value
            return True
        if rec is not None and rec.status == EntryStatus.FAILED:
            error = rec.error or ErrorRecord("Unknown")
            if error.final:
                raise StepFailed(self.step.name, rec.attempt, error.type, error.message)
        self.input = encoded_arguments(self.inv, self.step, self.args, self.kwargs)
        if rec is not None and rec.status in (EntryStatus.SCHEDULED, EntryStatus.IN_DOUBT):
            # only irreversible steps write these
            return in_doubt(self, marked=rec.status == EntryStatus.IN_DOUBT)
        failed = rec is not None and rec.status == EntryStatus.FAILED
        if failed and self.inv.retrying != f"{self.seq}:{self.attempt}":
            # The retry never began (``begin_attempt`` marks it on the run): the process
            # stopped during the backoff, which costs the step no attempt.
            return False
        if self.inv.recovering and not self.step.irreversible:
            self._charge_interruption()
        return False

    def pre_attempt(self) -> bool:
        """Before an irreversible step runs again, ask its ``verify`` (``irreversible.py``);
        True when that settled the call."""
        return check_then_act(self)

    def begin_attempt(self) -> None:
        """Irreversible steps record ``scheduled`` before each attempt, so a crash leaves the
        attempt visibly in doubt. Other steps mark a retry on the run (not in the journal), so
        that a crash during it is charged and a crash during the backoff before it is not; a
        first attempt writes nothing: the one-commit hot path."""
        if self.step.irreversible:
            try:
                self.record(EntryStatus.SCHEDULED, self.started_at)
            except LeaseLost:  # its attempt never began: the lost lease's warning names none
                self.inv.current_step = None
                raise
        elif self.attempt >= 2:
            self._journal(functools.partial(self.inv.mark_retry, f"{self.seq}:{self.attempt}"))

    def _journal(self, write: Callable[[], None]) -> None:
        """Make ``write`` now, or, for an async call, queue it for ``journal_async``."""
        if self.queues:
            self.writes.append(write)
        else:
            write()

    def record(
        self,
        status: EntryStatus,
        now: float,
        *,
        output: bytes | None = None,
        error: ErrorRecord | None = None,
        started: float | None = None,
        usage: tuple[Usage | None, str | None] = (None, None),
    ) -> None:
        self.checked = False  # a boundary check comes after anything journaled
        entry = self.entry(status, now, output=output, error=error, started=started, usage=usage)
        if status == EntryStatus.COMPLETED:
            if self.awaits_journal:
                self.unjournaled = entry
            else:
                defer_outcome(self.inv, entry)
        else:
            self._journal(functools.partial(self.inv.append, entry))
        count(self, entry)

    async def journal_async(self) -> None:
        """(An async call) Make the writes its decisions queued, in order, in a thread of the
        engine's while the run's loop goes on: every one of them, even if the call's task is
        cancelled meanwhile (it then raises ``CancelledError`` once they are made)."""
        writes, self.writes = self.writes, []

        def make() -> None:
            for write in writes:
                write()

        await self.inv.off_loop(make)

    def entry(
        self,
        status: EntryStatus,
        now: float,
        *,
        output: bytes | None = None,
        error: ErrorRecord | None = None,
        started: float | None = None,
        by: str | None = None,
        usage: tuple[Usage | None, str | None] = (None, None),
    ) -> Entry:
        return Entry(
            kind=EntryKind.STEP,
            name=self.step.name,
            status=status,
            seq=self.seq,
            position=self.position,
            attempt=self.attempt,
            started_at=started or self.started_at or now,
            finished_at=None if status == EntryStatus.SCHEDULED else now,
            input=self.input,
            output=output,
            error=error,
            compensable=status == EntryStatus.COMPLETED and self.step.compensate is not None,
            by=by,
            usage=usage[0],
            model=usage[1],
        )

    def _charge_interruption(self) -> None:
        """Count the attempt a crash interrupted, found when recovery reaches this step.

        Every step a recovery starts before it records anything new was in flight when the
        process stopped (the first one, or several started together by ``asyncio.gather``).
        An interruption is retried whatever ``retry_on`` says, within ``max_attempts``.
        """
        started, alive, said = self.interrupted_span()
        # Neither a crash nor a cancellation in an async workflow's own code (a timeout, a task
        # group around the call) records anything: the recovery cannot tell them apart.
        cause = CANCELLED_OR_STOPPED if self.inv.is_async else "its process stopped"
        exc = AttemptInterrupted(f"{said}: {cause} before the outcome was recorded")
        final = self.attempt >= self.step.retry.max_attempts
        self.record_failure(exc, started, alive, Decision(final=final))
        if final:
            raise StepFailed(self.step.name, self.attempt, type(exc).__name__, str(exc))
        self.attempt += 1

    def interrupted_span(self) -> tuple[float, float, str]:
        """The interrupted attempt's start, last sign of life and words (``interrupted.py``)."""
        now = self.inv.runtime.clock.time()
        return interrupted_span(self.inv.last_seen, seq=self.seq, attempt=self.attempt, now=now)

    def scope(self) -> StepScope:
        """Begin an attempt."""
        spend = spend_of(self.inv)
        if spend is not None:  # the attempt past a limit never starts
            if self.rec is None and self.current is None:
                spend.new_call(self.step.name, self.input)
            refusal = spend.refusal(self.inv.workflow_id, self.step.name, self.input)
            if refusal is not None:
                raise self.inv.abort(refusal, attention=True)
        self.started_at = started = self.inv.runtime.clock.time()
        self.current = StepScope(
            self.inv, self.step.name, self.seq, self.position, self.attempt, started_at=started
        )
        return self.current

    def check_alive(self) -> None:
        """At an attempt boundary: stop if the run may not go on (a new call's first attempt
        was checked by ``__init__`` a moment before, with nothing journaled since)."""
        if self.checked:
            self.checked = False
            return
        self.inv.check_alive()

    def admit(self) -> None:
        """Let the attempt past the step's breaker, or suspend the run until it may."""
        breaker = self.step.breaker
        if breaker is not None:
            key = f"{self.inv.workflow_id}/{self.seq}/{self.attempt}"
            self.probe = admit(self.inv, breaker, key)

    def target(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """The step's function and the call's arguments."""
        return self.step.fn, self.args, self.kwargs

    def durable_backoff(self) -> bool:
        """A step's long backoff always unwinds the run as a durable timer."""
        return True

    def stopped(self, scope: StepScope, exc: Exception) -> None:
        """A step that stopped because ``heartbeat`` saw a cancel or a lost lease is not
        retried: a cancelled attempt is journaled as the run's last (outcome ``stopped``, no
        retry announced), and a worker that lost the lease records nothing (its successor
        will)."""
        inv = self.inv
        if not isinstance(exc, WorkflowCancelled):
            return
        if inv.cancel_requested.is_set() and not inv.lease_lost.is_set():
            now = inv.runtime.clock.time()
            self.record_failure(exc, self.started_at, now, Decision(final=True))
            inv.check_alive()
        try:
            inv.check_alive()
        except EngineSignal:
            attempt_stopped(inv, scope)
            raise

    def settle(self, outcome: Any, error: BaseException | None) -> float | object:
        """Record an attempt's outcome; ``DONE`` (value in ``self.value``) or a retry delay."""
        self.inv.recovering = False
        now = self.inv.runtime.clock.time()
        usage = _used(self, outcome if error is None else None)  # kept if the check refuses it
        if error is None:
            step = self.step
            null = self.inv.runtime.codec.null if outcome is None and step.output is None else None
            try:
                if null is not None:  # what encoding and decoding None would give
                    payload, value = null, step.restore(None) if step.restore else None
                else:
                    payload = validate_and_encode(self.inv, step, outcome)
                    value = self.restored(payload)  # validated before it is recorded
            except (OutputInvalid, SerializationError) as exc:
                error = exc
        if isinstance(error, StepTimeout) and self.step.irreversible:
            # abandoned, not failed: it may still take effect; what it used is kept
            self.record(EntryStatus.IN_DOUBT, now, usage=usage)
            if in_doubt(self, marked=True):
                return DONE
            return 0.0
        if error is not None:
            decision = decide(self, error, now)
            self.record_failure(error, self.started_at, now, decision, usage=usage)
            if decision.final:
                message = str(error)
                if decision.refused is not None:  # say why a throttled call was not retried
                    message += f" [{decision.directed}, {decision.refused}]"
                raise StepFailed(
                    self.step.name, self.attempt, type(error).__name__, message
                ) from error
            self.attempt += 1
            self.retry_at = now + decision.delay
            return decision.delay
        self.record(EntryStatus.COMPLETED, now, output=payload, usage=usage)
        warn_if_unrecorded(self.inv.runtime, self.step, usage[0])
        self.value = value
        return DONE

    def restored(self, payload: bytes) -> Any:
        """The value workflow code receives: ``payload`` decoded, and rebuilt as the classes
        the step's annotation names (``SerializationError`` if it does not fit them)."""
        value = self.inv.runtime.codec.decode(payload)
        return self.step.restore(value) if self.step.restore else value

    def record_failure(
        self,
        error: BaseException,
        started: float,
        now: float,
        decision: Decision,
        *,
        usage: tuple[Usage | None, str | None] = (None, None),
    ) -> None:
        record = failure_record(error, now, decision)
        self.record(EntryStatus.FAILED, now, error=record, started=started, usage=usage)


def encoded_arguments(
    inv: Invocation, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bytes:
    """A step call's arguments as its journal entry keeps them (``SerializationError``, naming
    the argument, when one cannot be)."""
    try:
        return inv.runtime.codec.encode({"args": list(args), "kwargs": kwargs})
    except UnsupportedValue as exc:
        raise SerializationError(
            f"workflow {inv.wf.name!r} (run {inv.workflow_id!r}), step "
            f"{step.name!r}: cannot serialize an argument of type {exc.type_name} "
            f"at {argument_path(exc.path)}; pass JSON-compatible values "
            "(or opt in with serializer='pickle')"
        ) from None


def _used(call: StepCall, result: Any) -> tuple[Usage | None, str | None]:
    """What the call's attempt used and the model it came from (``None``: nothing recorded)."""
    recorded = call.current.usage if call.current is not None else {}
    if not recorded and result is None:  # the common attempt: nothing used
        return NO_USAGE
    return attempt_usage(recorded, result, call.inv.runtime.prices)


@guarded
def call_step(inv: Invocation, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run or replay a sync step inside a workflow."""
    call = StepCall(inv, step, args, kwargs)
    try:
        if call.replay():
            return call.value
        return run_attempts(call)
    except StepFailed as failure:
        final_failure(inv, failure, call.seq)
        raise


@guarded_async
async def call_step_async(
    inv: Invocation, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run or replay an async step inside an async workflow."""
    if inv.defers():  # the values its code recorded since its last boundary, first
        await inv.flush_async()
    call = StepCall(inv, step, args, kwargs, awaits_journal=True)
    try:
        try:
            replayed = call.replay()
        finally:
            if call.writes:  # the interrupted attempt it charged
                await call.journal_async()
        if replayed:
            return call.value
        inv.in_flight += 1
        try:
            value = await run_attempts_async(call)
            if (entry := call.unjournaled) is not None:
                call.unjournaled = None
                try:
                    await inv.append_async(entry)
                except LeaseLost:
                    inv.lost_outcomes.append(entry)  # it ran: the lost lease's warning names it
                    raise
            return value
        finally:
            if call.unjournaled is not None:  # the call stopped between outcome and journal
                inv.deferred.append(call.unjournaled)  # (the run's ending journals it)
            inv.in_flight -= 1
    except StepFailed as failure:
        final_failure(inv, failure, call.seq)
        raise
