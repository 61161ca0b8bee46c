"""Irreversible steps: an attempt that may have taken effect is checked with the step's
``verify`` before it runs again (check-then-act), and one nobody can check stops the run for
an operator (in doubt). These work on a step call through :class:`Irreversible`, the part of
``StepCall`` they use."""

from __future__ import annotations

from typing import Any, Protocol

from .._errors import StepFailed
from .._model import EntryStatus, ErrorRecord, ErrorType
from .._registry import StepDef
from .._retry import Decision
from .._signals import InDoubt
from .._store import Entry
from .invocation import CURRENT_STEP, Invocation, StepScope, step_key
from .outputs import validate_and_encode

__all__ = ["AttemptInterrupted", "Irreversible", "check_then_act", "in_doubt"]


class AttemptInterrupted(Exception):
    """An attempt whose process stopped before its outcome was recorded."""


class Irreversible(Protocol):
    """What the irreversible logic uses of a step call."""

    inv: Invocation
    step: StepDef
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    position: str
    seq: int
    attempt: int
    rerun: bool
    started_at: float
    value: Any

    def scope(self) -> StepScope: ...

    def record(self, status: EntryStatus, now: float) -> None: ...

    def entry(
        self,
        status: EntryStatus,
        now: float,
        *,
        output: bytes | None = ...,
        error: ErrorRecord | None = ...,
        by: str | None = ...,
    ) -> Entry: ...

    def record_failure(
        self, error: BaseException, started: float, now: float, decision: Decision
    ) -> None: ...

    def restored(self, payload: bytes) -> Any: ...

    def interrupted_span(self) -> tuple[float, float, str]: ...


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = "(" + ", ".join(parts) + ")"  # a call, not a tuple: ('b') for one argument
    return text if len(text) <= 300 else text[:297] + "...)"


def _settle(workflow_id: str, seq: int) -> str:
    return (
        f"stalwart resolve {workflow_id} {seq} --result JSON with what happened, or --rerun to "
        f"run it again (in Python: app.resolve({workflow_id!r}, {seq}, result=...) or rerun=True)"
    )


def _verify(call: Irreversible) -> Any:
    """Ask the step's ``verify`` whether the effect already happened (its result or None)."""
    assert call.step.verify is not None
    token = CURRENT_STEP.set(call.scope())
    try:
        return call.step.verify(*call.args, **call.kwargs)
    except Exception as exc:
        key = step_key(call.inv.workflow_id, call.position)
        raise InDoubt(
            f"irreversible step {call.step.name!r} (seq {call.seq}) may have taken effect, "
            f"and its verify raised {type(exc).__name__}: {exc}. It was called as "
            f"{call.step.name}{_describe(call.args, call.kwargs)} with idempotency key "
            f"{key!r}. Check the effect downstream, then settle it: "
            f"{_settle(call.inv.workflow_id, call.seq)}",
            seq=call.seq,
        ) from exc
    finally:
        CURRENT_STEP.reset(token)


def in_doubt(call: Irreversible, *, marked: bool) -> bool:
    """An attempt may have taken effect: check it, or stop and ask an operator.

    The interruption is this step's: it is recorded here (as ``in_doubt``, or as a failed
    attempt when verify finds no effect), so a recovery never charges a later step."""
    call.inv.recovering = False
    if not marked:  # a crash interrupted it: journaled with its real start
        call.started_at = call.interrupted_span()[0]
    if call.step.verify is None:
        if not marked:
            call.record(EntryStatus.IN_DOUBT, call.inv.runtime.clock.time())
        key = step_key(call.inv.workflow_id, call.position)
        reason = (
            f"irreversible step {call.step.name!r} (seq {call.seq}) may have taken effect: "
            f"attempt {call.attempt} was interrupted before its outcome was recorded. It was "
            f"called as {call.step.name}{_describe(call.args, call.kwargs)} with idempotency "
            f"key {key!r}. "
            "Check the effect downstream, then settle it: "
            f"{_settle(call.inv.workflow_id, call.seq)}"
        )
        raise InDoubt(reason, seq=call.seq)
    if check_then_act(call, force=True, interrupted=not marked):
        return True
    exc = AttemptInterrupted(
        f"attempt {call.attempt} was interrupted; verify found no effect, so it runs again"
    )
    now = call.inv.runtime.clock.time()
    final = call.attempt >= call.step.retry.max_attempts
    call.record_failure(exc, call.started_at or now, now, Decision(final=final))
    if final:
        raise StepFailed(call.step.name, call.attempt, type(exc).__name__, str(exc))
    call.attempt += 1
    return False


def check_then_act(call: Irreversible, *, force: bool = False, interrupted: bool = False) -> bool:
    """Before an irreversible step runs again, check-then-act: a non-``None`` answer from
    ``verify`` is recorded as the step's result, with ``by="verify"``. With
    ``interrupted`` (a recovery found the attempt only ``scheduled``), the interrupted
    attempt is recorded as ``in_doubt`` in the same transaction. True when that settled
    the call."""
    step = call.step
    if not step.irreversible or step.verify is None or call.rerun:
        return False
    if call.attempt <= 1 and not force:
        return False
    found = _verify(call)
    if found is None:
        return False
    payload = validate_and_encode(call.inv, call.step, found)
    value = call.restored(payload)  # an answer that does not fit is refused unrecorded
    now = call.inv.runtime.clock.time()
    settled = call.entry(EntryStatus.COMPLETED, now, output=payload, by="verify")
    if interrupted:
        detail = ErrorRecord(
            ErrorType.ATTEMPT_INTERRUPTED,
            f"attempt {call.attempt} was interrupted before its outcome was recorded; "
            "verify found its effect, so it did not run again",
        )
        doubt = call.entry(EntryStatus.IN_DOUBT, now, error=detail)
        call.inv.append_many([doubt, settled])
    else:
        call.inv.append(settled)
    call.value = value
    return True
