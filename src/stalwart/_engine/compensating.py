"""One compensation as the attempt loop drives it (:class:`Compensation`): the same loop as a
step's, so a compensation gets a step's retries, timeout, breaker, ``Retry-After``, usage and
metrics. What differs is said here: each attempt is marked on the run first (so a crash in it
is charged), a success is journaled with the step's ``compensated`` mark in one transaction,
a failure for good raises :class:`CompensationFailed` (the run needs an operator), and a run
whose cancel is requested never suspends: it waits for a backoff or a breaker in place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._model import EntryKind, EntryStatus, ErrorRecord, Usage
from .._registry import StepDef
from .._signals import LeaseLost, Suspend
from .._store import Entry
from .._usage import attempt_usage
from .attempt import DONE, count, decide, failure_record
from .breakers import admit
from .invocation import Invocation, StepScope
from .observe import attempt_stopped

__all__ = ["Compensation", "CompensationFailed", "Undo", "retry_marker"]


class CompensationFailed(Exception):
    """A compensation exhausted its retries; the run needs an operator."""

    def __init__(self, message: str, *, seq: int):
        super().__init__(message)
        self.seq = seq


@dataclass
class Undo:
    """One completed step to compensate, and what its compensation has done so far."""

    seq: int
    position: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    result: Any
    attempts: int
    retry_at: float = 0.0  # when its next attempt may start, as its last failure said


def retry_marker(seq: int, attempt: int) -> str:
    """The run's mark that attempt ``attempt`` of the compensation of seq ``seq`` began."""
    return f"undo:{seq}:{attempt}"


class Compensation:
    """The attempts of one step's compensation (see the module docstring)."""

    def __init__(
        self,
        inv: Invocation,
        step: StepDef,
        undo: Undo,
        result: Any,
        *,
        attempts: int,
        charged: Entry | None,
    ) -> None:
        self.inv = inv
        self.step = step
        self.policy = step.undo_retry or step.retry
        self.seq = undo.seq
        self.position = undo.position
        self.attempt = attempts + 1
        # a charged interruption is retried at once; else the backoff its last failure owes
        self.retry_at = 0.0 if charged is not None else undo.retry_at
        self.value: Any = None
        self.current: StepScope | None = None
        self.probe: str | None = None
        self.reported = False
        self.args = (result, *undo.args)
        self.kwargs = dict(undo.kwargs)
        self.started_at = 0.0

    @property
    def label(self) -> str:
        """How messages name this call."""
        return f"the compensation of step {self.step.name!r}"

    def check_alive(self) -> None:
        """A rollback goes on through a cancel or a deadline; only a lost lease stops it."""
        if self.inv.lease_lost.is_set():
            raise LeaseLost()

    def pre_attempt(self) -> bool:
        """A compensation has nothing to settle before its attempt."""
        return False

    def admit(self) -> None:
        """Let the attempt past the step's breaker: suspend the run until it may, or, when
        the run cannot suspend (its cancel is requested), wait for it here."""
        breaker, inv = self.step.breaker, self.inv
        if breaker is None:
            return
        key = f"{inv.workflow_id}/{self.seq}/undo/{self.attempt}"
        while True:
            try:
                self.probe = admit(inv, breaker, key)
                return
            except Suspend as wait:
                if self.durable_backoff():
                    raise
                inv.suspended = None
                clock = inv.runtime.clock
                clock.sleep(max(0.0, (wait.wake_at or 0.0) - clock.time()))

    def scope(self) -> StepScope:
        """Begin an attempt."""
        self.started_at = started = self.inv.runtime.clock.time()
        self.current = StepScope(
            *(self.inv, self.step.name, self.seq, self.position, self.attempt),
            suffix="/undo",
            started_at=started,
        )
        return self.current

    def begin_attempt(self) -> None:
        """Mark the attempt on the run: a recovery that finds the mark with no outcome
        charges the attempt as interrupted."""
        marker = retry_marker(self.seq, self.attempt)
        self.inv.mark_retry(marker)
        self.inv.retrying = marker

    def target(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """The step's compensation, given the step's result and arguments."""
        assert self.step.compensate is not None
        return self.step.compensate, self.args, self.kwargs

    def stopped(self, scope: StepScope, exc: Exception) -> None:
        """A compensation stops only for a lost lease (its successor records the attempt)."""
        if self.inv.lease_lost.is_set():
            attempt_stopped(self.inv, scope)
            raise LeaseLost()

    def durable_backoff(self) -> bool:
        """A run whose cancel is requested cannot suspend: it waits in place."""
        return not self.inv.cancel_requested.is_set()

    def settle(self, outcome: Any, error: BaseException | None) -> float | object:
        """Journal the attempt: a success with the step's ``compensated`` mark, in one
        transaction; a failure, then the delay before the next attempt, or
        ``CompensationFailed`` when none is left."""
        inv = self.inv
        now = inv.runtime.clock.time()
        recorded = self.current.usage if self.current is not None else {}
        usage = attempt_usage(recorded, outcome if error is None else None, inv.runtime.prices)
        if error is None:
            done = self._entry(EntryStatus.COMPLETED, now, usage=usage)
            mark = Entry(
                kind=EntryKind.STEP,
                name=self.step.name,
                status=EntryStatus.COMPENSATED,
                seq=self.seq,
                position=self.position,
                attempt=self.attempt,
                started_at=now,
                finished_at=now,
            )
            inv.append_many([done, mark])
            count(self, done)
            return DONE
        decision = decide(self, error, now)
        failed = self._entry(
            EntryStatus.FAILED, now, error=failure_record(error, now, decision), usage=usage
        )
        inv.append(failed)
        count(self, failed)
        if decision.final:
            raise CompensationFailed(
                f"{self.label} (seq {self.seq}) failed after {self.attempt} attempt(s): "
                f"{type(error).__name__}: {error}; fix the cause, then retry the run to "
                "continue the rollback",
                seq=self.seq,
            )
        self.attempt += 1
        self.retry_at = now + decision.delay
        return decision.delay

    def _entry(
        self,
        status: EntryStatus,
        now: float,
        *,
        error: ErrorRecord | None = None,
        usage: tuple[Usage | None, str | None] = (None, None),
    ) -> Entry:
        return Entry(
            kind=EntryKind.COMPENSATION,
            name=self.step.name,
            status=status,
            seq=self.seq,
            position=self.position,
            attempt=self.attempt,
            started_at=self.started_at,
            finished_at=now,
            error=error,
            usage=usage[0],
            model=usage[1],
        )
