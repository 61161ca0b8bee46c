"""Journaled step calls: replay a recorded outcome, or run attempts until one is recorded."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable
from typing import Any

from .._clock import SystemClock
from .._errors import (
    OutputInvalid,
    SerializationError,
    StepFailed,
    StepTimeout,
    WorkflowCancelled,
)
from .._model import EntryKind, EntryStatus, ErrorRecord, ErrorType
from .._registry import StepDef
from .._retry import Decision
from .._serde import UnsupportedValue, argument_path
from .._signals import EngineSignal, InDoubt
from .._store import Entry
from .._usage import attempt_usage
from .breakers import admit, report
from .budget import spend_of
from .interrupted import interrupted_span
from .invocation import (
    CURRENT_STEP,
    Invocation,
    Recorded,
    StepScope,
    guarded,
    guarded_async,
    step_key,
)
from .observe import attempt_began, attempt_recorded, attempt_stopped
from .outputs import validate_and_encode

__all__ = ["call_step", "call_step_async"]

_DONE = object()
# A backoff longer than this unwinds the run as a durable timer instead of holding a thread.
DURABLE_BACKOFF_SECONDS = 5.0


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = "(" + ", ".join(parts) + ")"  # a call, not a tuple: ('b') for one argument
    return text if len(text) <= 300 else text[:297] + "...)"


def _settle(workflow_id: str, seq: int) -> str:
    return (
        f"stalwart resolve {workflow_id} {seq} --result JSON with what happened, or --rerun to "
        f"run it again (in Python: app.resolve({workflow_id!r}, {seq}, result=...) or rerun=True)"
    )


class AttemptInterrupted(Exception):
    """An attempt whose process stopped before its outcome was recorded."""


class StepCall:
    """The decisions of one journaled step call, shared by the sync and async drivers."""

    def __init__(
        self, inv: Invocation, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]
    ):
        inv.check_alive()
        self.inv = inv
        self.step = step
        self.args = args
        self.kwargs = kwargs
        self.position = inv.next_position()
        self.rec: Recorded | None = inv.lookup(self.position, "step", step.name)
        self.value: Any = None
        self.started_at = 0.0
        self.current: StepScope | None = None  # the attempt under way
        self.rerun = False
        self.probe: str | None = None  # this attempt is its breaker's half-open probe
        self.reported = False  # this attempt's failure is already counted by its breaker

    def replay(self) -> bool:
        """Settle the call from the journal if it can be; True when ``self.value`` is final."""
        rec = self.rec
        if rec is None:
            self.seq = self.inv.alloc_seq()
            self.attempt = 1
            self.retry_at = 0.0
        elif rec.status == EntryStatus.COMPLETED:
            value = self.inv.load_value(rec)
            self.value = self.step.restore(value) if self.step.restore else value
            return True
        elif rec.status == EntryStatus.COMPENSATED:  # undone: a retry or fork runs it again
            self.seq, self.attempt, self.retry_at = rec.seq, 1, 0.0
        elif rec.status in (EntryStatus.SCHEDULED, EntryStatus.IN_DOUBT):
            # only irreversible steps write these
            self.seq, self.attempt, self.retry_at = rec.seq, rec.attempt, 0.0
            self.input = self._encode_input()
            return self._in_doubt(marked=rec.status == EntryStatus.IN_DOUBT)
        else:
            error = rec.error or ErrorRecord("Unknown")
            if error.final:
                raise StepFailed(self.step.name, rec.attempt, error.type, error.message)
            self.seq = rec.seq
            self.attempt = rec.attempt + 1
            self.retry_at = float(error.retry_at or 0.0)
            self.rerun = error.rerun
            if self.inv.retrying != f"{self.seq}:{self.attempt}":
                # The retry never began (``begin_attempt`` marks it on the run): the process
                # stopped during the backoff, which costs the step no attempt.
                self.input = self._encode_input()
                return False
        self.input = self._encode_input()
        if self.inv.recovering and not self.step.irreversible:
            self._charge_interruption()
        return False

    # -- irreversible steps ---------------------------------------------------------------

    def _verify(self) -> Any:
        """Ask the step's ``verify`` whether the effect already happened (its result or None)."""
        assert self.step.verify is not None
        token = CURRENT_STEP.set(self.scope())
        try:
            return self.step.verify(*self.args, **self.kwargs)
        except Exception as exc:
            key = step_key(self.inv.workflow_id, self.position)
            raise InDoubt(
                f"irreversible step {self.step.name!r} (seq {self.seq}) may have taken effect, "
                f"and its verify raised {type(exc).__name__}: {exc}. It was called as "
                f"{self.step.name}{_describe(self.args, self.kwargs)} with idempotency key "
                f"{key!r}. Check the effect downstream, then settle it: "
                f"{_settle(self.inv.workflow_id, self.seq)}",
                seq=self.seq,
            ) from exc
        finally:
            CURRENT_STEP.reset(token)

    def _in_doubt(self, *, marked: bool) -> bool:
        """An attempt may have taken effect: check it, or stop and ask an operator.

        The interruption is this step's: it is recorded here (as ``in_doubt``, or as a failed
        attempt when verify finds no effect), so a recovery never charges a later step."""
        self.inv.recovering = False
        if not marked:  # a crash interrupted it: journaled with its real start
            self.started_at = self._interrupted_span()[0]
        if self.step.verify is None:
            if not marked:
                self._record(EntryStatus.IN_DOUBT, self.inv.runtime.clock.time())
            key = step_key(self.inv.workflow_id, self.position)
            reason = (
                f"irreversible step {self.step.name!r} (seq {self.seq}) may have taken effect: "
                f"attempt {self.attempt} was interrupted before its outcome was recorded. It was "
                f"called as {self.step.name}{_describe(self.args, self.kwargs)} with idempotency "
                f"key {key!r}. "
                "Check the effect downstream, then settle it: "
                f"{_settle(self.inv.workflow_id, self.seq)}"
            )
            raise InDoubt(reason, seq=self.seq)
        if self.pre_attempt(force=True, interrupted=not marked):
            return True
        exc = AttemptInterrupted(
            f"attempt {self.attempt} was interrupted; verify found no effect, so it runs again"
        )
        now = self.inv.runtime.clock.time()
        final = self.attempt >= self.step.retry.max_attempts
        self._record_failure(exc, self.started_at or now, now, Decision(final=final))
        if final:
            raise StepFailed(self.step.name, self.attempt, type(exc).__name__, str(exc))
        self.attempt += 1
        return False

    def pre_attempt(self, *, force: bool = False, interrupted: bool = False) -> bool:
        """Before an irreversible step runs again, check-then-act: a non-``None`` answer from
        ``verify`` is recorded as the step's result, with ``by="verify"``. With
        ``interrupted`` (a recovery found the attempt only ``scheduled``), the interrupted
        attempt is recorded as ``in_doubt`` in the same transaction. True when that settled
        the call."""
        step = self.step
        if not step.irreversible or step.verify is None or self.rerun:
            return False
        if self.attempt <= 1 and not force:
            return False
        found = self._verify()
        if found is None:
            return False
        payload = validate_and_encode(self.inv, self.step, found)
        value = self._restored(payload)  # an answer that does not fit is refused unrecorded
        now = self.inv.runtime.clock.time()
        settled = self._entry(EntryStatus.COMPLETED, now, output=payload, by="verify")
        if interrupted:
            detail = ErrorRecord(
                ErrorType.ATTEMPT_INTERRUPTED,
                f"attempt {self.attempt} was interrupted before its outcome was recorded; "
                "verify found its effect, so it did not run again",
            )
            in_doubt = self._entry(EntryStatus.IN_DOUBT, now, error=detail.to_json())
            self.inv.append_many([in_doubt, settled])
        else:
            self.inv.append(settled)
        self.value = value
        return True

    def begin_attempt(self) -> None:
        """Irreversible steps record ``scheduled`` before each attempt, so a crash leaves the
        attempt visibly in doubt. Other steps mark a retry on the run (not in the journal), so
        that a crash during it is charged and a crash during the backoff before it is not; a
        first attempt writes nothing: the one-commit hot path."""
        if self.step.irreversible:
            self._record(EntryStatus.SCHEDULED, self.started_at)
        elif self.attempt >= 2:
            self.inv.mark_retry(f"{self.seq}:{self.attempt}")

    def _record(
        self,
        status: str,
        now: float,
        *,
        output: bytes | None = None,
        error: str | None = None,
        started: float | None = None,
        usage: str | None = None,
    ) -> None:
        entry = self._entry(status, now, output=output, error=error, started=started)
        entry.usage = usage
        self.inv.append(entry)
        _count(self, entry)

    def _entry(
        self,
        status: str,
        now: float,
        *,
        output: bytes | None = None,
        error: str | None = None,
        started: float | None = None,
        by: str | None = None,
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
        )

    def _encode_input(self) -> bytes:
        try:
            return self.inv.runtime.codec.encode({"args": list(self.args), "kwargs": self.kwargs})
        except UnsupportedValue as exc:
            raise SerializationError(
                f"workflow {self.inv.wf.name!r} (run {self.inv.workflow_id!r}), step "
                f"{self.step.name!r}: cannot serialize an argument of type {exc.type_name} "
                f"at {argument_path(exc.path)}; pass JSON-compatible values "
                "(or opt in with serializer='pickle')"
            ) from None

    def _charge_interruption(self) -> None:
        """Count the attempt a crash interrupted, found when recovery reaches this step.

        Every step a recovery starts before it records anything new was in flight when the
        process stopped (the first one, or several started together by ``asyncio.gather``).
        An interruption is retried whatever ``retry_on`` says, within ``max_attempts``.
        """
        started, alive, said = self._interrupted_span()
        exc = AttemptInterrupted(f"{said}: its process stopped before the outcome was recorded")
        final = self.attempt >= self.step.retry.max_attempts
        self._record_failure(exc, started, alive, Decision(final=final))
        if final:
            raise StepFailed(self.step.name, self.attempt, type(exc).__name__, str(exc))
        self.attempt += 1

    def _interrupted_span(self) -> tuple[float, float, str]:
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
        self.started_at = self.inv.runtime.clock.time()
        self.current = StepScope(self.inv, self.step.name, self.seq, self.position, self.attempt)
        return self.current

    def wait_before_attempt(self) -> float:
        """Seconds of backoff still owed before the next attempt."""
        return max(0.0, self.retry_at - self.inv.runtime.clock.time())

    def settle(self, outcome: Any, error: BaseException | None) -> float | object:
        """Record an attempt's outcome; ``_DONE`` (value in ``self.value``) or a retry delay."""
        self.inv.recovering = False
        now = self.inv.runtime.clock.time()
        usage = self._usage(outcome if error is None else None)  # kept if the check refuses it
        if error is None:
            try:
                payload = validate_and_encode(self.inv, self.step, outcome)
                value = self._restored(payload)  # validated before it is recorded
            except (OutputInvalid, SerializationError) as exc:
                error = exc
        if isinstance(error, StepTimeout) and self.step.irreversible:
            # abandoned, not failed: it may still take effect
            self._record(EntryStatus.IN_DOUBT, now)
            if self._in_doubt(marked=True):
                return _DONE
            return 0.0
        if error is not None:
            decision = _decide(self, error, now)
            self._record_failure(error, self.started_at, now, decision, usage=usage)
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
        self._record(EntryStatus.COMPLETED, now, output=payload, usage=usage)
        self.value = value
        return _DONE

    def _usage(self, result: Any) -> str | None:
        """What this attempt used, as journaled (``None``: nothing recorded)."""
        recorded = self.current.usage if self.current is not None else {}
        return attempt_usage(recorded, result, self.inv.runtime.prices)

    def _restored(self, payload: bytes) -> Any:
        """The value workflow code receives: ``payload`` decoded, and rebuilt as the classes
        the step's annotation names (``SerializationError`` if it does not fit them)."""
        value = self.inv.runtime.codec.decode(payload)
        return self.step.restore(value) if self.step.restore else value

    def _record_failure(
        self,
        error: BaseException,
        started: float,
        now: float,
        decision: Decision,
        *,
        usage: str | None = None,
    ) -> None:
        directed = decision.directed
        if decision.refused is not None:
            directed = f"{directed}, {decision.refused}"
        retry_at = None if decision.final else now + decision.delay
        detail = ErrorRecord.of(error, final=decision.final, retry_at=retry_at, directed=directed)
        self._record(EntryStatus.FAILED, now, error=detail.to_json(), started=started, usage=usage)


def _decide(call: StepCall, error: BaseException, now: float) -> Decision:
    """What the step's ``Retry`` says about a failed attempt. With a breaker, the failure is
    counted first, and a retryable one after which the breaker is open is never the run's
    last attempt for want of attempts: the run waits for the breaker, so a long outage costs
    one attempt per cooldown fleet-wide, not the runs themselves."""
    rng, breaker = call.inv.runtime.rng, call.step.breaker
    decision = call.step.retry.decide(error, call.attempt, now=now, rng=rng)
    if breaker is None:
        return decision
    call.reported = True
    held = report(call.inv, breaker, call.probe, ok=False)
    if decision.final and held and not call.step.retry.decide(error, 1, now=now, rng=rng).final:
        return Decision(final=False, delay=0.0)
    return decision


def _count(call: StepCall, entry: Entry) -> None:
    """A recorded attempt counts in the run's spend and its breaker's window, and is told to
    the logs (a failure) and the observers."""
    inv, breaker, status = call.inv, call.step.breaker, entry.status
    if status != EntryStatus.SCHEDULED:
        inv.current_step = None
    if breaker is not None and status != EntryStatus.SCHEDULED and not call.reported:
        report(inv, breaker, call.probe, ok=status == EntryStatus.COMPLETED)
    call.reported = False
    if inv.spend is not None and status in (EntryStatus.COMPLETED, EntryStatus.FAILED):
        inv.spend.add(entry.usage)
    if inv.observe is not None or status != EntryStatus.COMPLETED:
        attempt_recorded(inv, call.current, entry)


def _run_sync_attempt(step: StepDef, scope: StepScope, args: Any, kwargs: Any) -> Any:
    hooks = scope.invocation.observe
    if hooks is not None:
        with attempt_began(hooks, scope):
            return _sync_attempt(step, scope, args, kwargs)
    return _sync_attempt(step, scope, args, kwargs)


def _sync_attempt(step: StepDef, scope: StepScope, args: Any, kwargs: Any) -> Any:
    token = CURRENT_STEP.set(scope)
    try:
        if step.timeout is None:
            return step.fn(*args, **kwargs)
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = step.fn(*args, **kwargs)
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(target,),
            daemon=True,
            name=f"stalwart-step-{step.name}",
        )
        thread.start()
        thread.join(step.timeout)
        if thread.is_alive():
            raise StepTimeout(
                f"step {step.name!r} attempt {scope.attempt} ran longer than its timeout of "
                f"{step.timeout}s; it was abandoned and its late result will be discarded"
            )
        if "error" in box:
            raise box["error"]
        return box.get("value")
    finally:
        CURRENT_STEP.reset(token)


@guarded
def call_step(inv: Invocation, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run or replay a sync step inside a workflow."""
    call = StepCall(inv, step, args, kwargs)
    if call.replay():
        return call.value
    if call.retry_at:
        _back_off(inv, call, call.wait_before_attempt())
    while True:
        inv.check_alive()
        if call.pre_attempt():
            return call.value
        if step.breaker is not None:
            call.probe = admit(inv, step.breaker, f"{inv.workflow_id}/{call.seq}/{call.attempt}")
        scope = call.scope()
        call.begin_attempt()
        try:
            outcome, error = _run_sync_attempt(step, scope, args, kwargs), None
        except EngineSignal:
            raise
        except Exception as exc:
            _stopped(call, scope, exc)
            outcome, error = None, exc
        verdict = call.settle(outcome, error)
        if verdict is _DONE:
            return call.value
        assert isinstance(verdict, float)
        _back_off(inv, call, verdict)


async def _run_async_attempt(step: StepDef, scope: StepScope, args: Any, kwargs: Any) -> Any:
    hooks = scope.invocation.observe
    if hooks is not None:
        with attempt_began(hooks, scope):
            return await _async_attempt(step, scope, args, kwargs)
    return await _async_attempt(step, scope, args, kwargs)


async def _async_attempt(step: StepDef, scope: StepScope, args: Any, kwargs: Any) -> Any:
    token = CURRENT_STEP.set(scope)
    try:
        coro: Awaitable[Any] = step.fn(*args, **kwargs)
        if step.timeout is None:
            return await coro
        deadline = asyncio.timeout(step.timeout)
        try:
            async with deadline:
                return await coro
        except TimeoutError:
            if not deadline.expired():
                raise
            raise StepTimeout(
                f"step {step.name!r} attempt {scope.attempt} ran longer than its timeout of "
                f"{step.timeout}s and was cancelled"
            ) from None
    finally:
        CURRENT_STEP.reset(token)


def _stopped(call: StepCall, scope: StepScope, exc: Exception) -> None:
    """A step that stopped because ``heartbeat`` saw a cancel or a lost lease is not retried:
    a cancelled attempt is journaled as the run's last (outcome ``stopped``, no retry
    announced), and a worker that lost the lease records nothing (its successor will)."""
    inv = call.inv
    if not isinstance(exc, WorkflowCancelled):
        return
    if inv.cancel_requested.is_set() and not inv.lease_lost.is_set():
        now = inv.runtime.clock.time()
        call._record_failure(exc, call.started_at, now, Decision(final=True))
        inv.check_alive()
    try:
        inv.check_alive()
    except EngineSignal:
        attempt_stopped(inv, scope)
        raise


def _pause_before_retry(inv: Invocation, call: StepCall, seconds: float) -> float:
    """Seconds to wait in place before the next attempt; a longer backoff unwinds the run
    as a durable timer instead of holding a thread."""
    if seconds > DURABLE_BACKOFF_SECONDS:
        raise inv.suspend(wake_at=call.retry_at, waiting_for=None)
    return seconds


def _back_off(inv: Invocation, call: StepCall, seconds: float) -> None:
    pause = _pause_before_retry(inv, call, seconds)
    if pause > 0:
        inv.runtime.clock.sleep(pause)


async def _back_off_async(inv: Invocation, call: StepCall, seconds: float) -> None:
    pause = _pause_before_retry(inv, call, seconds)
    if pause <= 0:
        return
    clock = inv.runtime.clock
    if isinstance(clock, SystemClock):  # on the loop: a waiting run holds no thread
        await asyncio.sleep(pause)
    else:  # a test's clock sleeps its own way
        await asyncio.to_thread(clock.sleep, pause)


@guarded_async
async def call_step_async(
    inv: Invocation, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run or replay an async step inside an async workflow."""
    call = StepCall(inv, step, args, kwargs)
    if call.replay():
        return call.value
    inv.in_flight += 1
    try:
        return await _attempts_async(inv, call, step, args, kwargs)
    finally:
        inv.in_flight -= 1


async def _attempts_async(
    inv: Invocation, call: StepCall, step: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if call.retry_at:
        await _back_off_async(inv, call, call.wait_before_attempt())
    while True:
        inv.check_alive()
        if call.pre_attempt():
            return call.value
        if step.breaker is not None:
            call.probe = admit(inv, step.breaker, f"{inv.workflow_id}/{call.seq}/{call.attempt}")
        scope = call.scope()
        call.begin_attempt()
        try:
            outcome, error = await _run_async_attempt(step, scope, args, kwargs), None
        except EngineSignal:
            raise
        except Exception as exc:
            _stopped(call, scope, exc)
            outcome, error = None, exc
        verdict = call.settle(outcome, error)
        if verdict is _DONE:
            return call.value
        assert isinstance(verdict, float)
        await _back_off_async(inv, call, verdict)
