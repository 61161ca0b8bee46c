"""One attempt of a step or of its compensation: what the attempt loop asks of a call
(:class:`Attempted`), what follows a failed attempt (:func:`decide`), how a failure is
recorded (:func:`failure_record`) and what a recorded attempt counts towards (:func:`count`:
the run's spend, its breaker's window, the logs and the observers' metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from .._model import EntryStatus, ErrorRecord
from .._registry import StepDef
from .._retry import Decision, Retry
from .._store import Entry
from .breakers import report
from .invocation import Invocation, StepScope
from .observe import attempt_recorded

__all__ = ["DONE", "AsyncAttempted", "Attempted", "count", "decide", "failure_record"]

DONE = object()  # ``settle``: the call has its value


class Attempted(Protocol):
    """A call the attempt loop drives: a step call or a compensation."""

    inv: Invocation
    step: StepDef
    policy: Retry  # the retry policy of its attempts
    seq: int
    attempt: int
    retry_at: float  # when the next attempt may start (0: at once)
    value: Any  # the call's value once settled
    current: StepScope | None  # the attempt under way
    probe: str | None  # this attempt is its breaker's half-open probe
    reported: bool  # this attempt's failure is already counted by its breaker
    started_at: float  # when the attempt under way began

    @property
    def label(self) -> str:
        """How messages name it: ``step 'x'``, ``the compensation of step 'x'``."""

    def check_alive(self) -> None:
        """At an attempt boundary: stop if the call may not go on."""

    def pre_attempt(self) -> bool:
        """Before an attempt: ``True`` when the call settled without one."""

    def admit(self) -> None:
        """Let the attempt past its breaker (or wait for it)."""

    def scope(self) -> StepScope:
        """Begin an attempt."""

    def begin_attempt(self) -> None:
        """Journal or mark what a crash during the attempt must find."""

    def target(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """The function an attempt calls, and its arguments."""

    def stopped(self, scope: StepScope, exc: Exception) -> None:
        """An attempt raised ``exc``: stop here if it stopped for the run (a cancel seen by
        ``heartbeat``, a lost lease)."""

    def settle(self, outcome: Any, error: BaseException | None) -> float | object:
        """Record an attempt's outcome: :data:`DONE` or the delay before the next."""

    def durable_backoff(self) -> bool:
        """Whether a long backoff may unwind the run as a durable timer."""


class AsyncAttempted(Attempted, Protocol):
    """A call driven on the run's event loop, whose decisions queue their writes."""

    writes: list[Callable[[], None]]  # what they queued, not yet made

    async def journal_async(self) -> None:
        """Make the writes its decisions queued, in order, off the run's loop."""


def decide(call: Attempted, error: BaseException, now: float) -> Decision:
    """What the call's ``Retry`` says about a failed attempt. With a breaker, the failure is
    counted first, and a retryable one after which the breaker is open is never the run's
    last attempt for want of attempts: the run waits for the breaker, so a long outage costs
    one attempt per cooldown fleet-wide, not the runs themselves."""
    rng, breaker, policy = call.inv.runtime.rng, call.step.breaker, call.policy
    decision = policy.decide(error, call.attempt, now=now, rng=rng)
    if breaker is None:
        return decision
    call.reported = True
    held = report(call.inv, breaker, call.probe, ok=False, started=call.started_at)
    if decision.final and held and not policy.decide(error, 1, now=now, rng=rng).final:
        return Decision(final=False, delay=0.0)
    return decision


def failure_record(error: BaseException, now: float, decision: Decision) -> ErrorRecord:
    """Pure: the journaled error of a failed attempt, with when the next one may start."""
    directed = decision.directed
    if decision.refused is not None:
        directed = f"{directed}, {decision.refused}"
    retry_at = None if decision.final else now + decision.delay
    return ErrorRecord.of(error, final=decision.final, retry_at=retry_at, directed=directed)


def count(call: Attempted, entry: Entry) -> None:
    """A recorded attempt counts in the run's spend and its breaker's window, and is told to
    the logs (a failure) and the observers."""
    inv, breaker, status = call.inv, call.step.breaker, entry.status
    if status != EntryStatus.SCHEDULED:
        inv.current_step = None
    if breaker is not None and status != EntryStatus.SCHEDULED and not call.reported:
        ok = status == EntryStatus.COMPLETED
        report(inv, breaker, call.probe, ok=ok, started=call.started_at)
    call.reported = False
    if inv.spend is not None and status in (EntryStatus.COMPLETED, EntryStatus.FAILED):
        inv.spend.add(entry.usage)
    elif inv.spend is not None and status == EntryStatus.IN_DOUBT and entry.usage is not None:
        inv.spend.used += replace(entry.usage, attempts=0)  # the attempt counts where it ends
    if inv.observe is not None or status != EntryStatus.COMPLETED:
        attempt_recorded(inv, call.current, entry)
