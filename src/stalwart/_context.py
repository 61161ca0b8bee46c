"""Calls made inside workflows and steps; they read the ambient run from ``contextvars``."""

from __future__ import annotations

import datetime as _dt
import random as _random
import uuid as _uuid
from typing import Any, NoReturn

from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, StepScope
from ._errors import WorkflowCancelled, not_built

__all__ = [
    "attempt",
    "heartbeat",
    "idempotency_key",
    "now",
    "random",
    "request_approval",
    "request_approval_async",
    "sleep",
    "sleep_async",
    "uuid4",
    "wait_for_event",
    "wait_for_event_async",
    "workflow_id",
]


def _in_step(call: str) -> StepScope:
    scope = CURRENT_STEP.get()
    if scope is None:
        raise RuntimeError(f"stalwart.{call}() can only be called inside a step")
    return scope


def workflow_id() -> str:
    """The id of the workflow run this code belongs to."""
    scope = CURRENT_STEP.get()
    if scope is not None:
        return scope.invocation.workflow_id
    inv = CURRENT_RUN.get()
    if inv is None:
        raise RuntimeError("stalwart.workflow_id() can only be called inside a workflow or step")
    return inv.workflow_id


def idempotency_key() -> str:
    """A key unique to this step call in this run, identical on every retry and recovery."""
    return _in_step("idempotency_key").idempotency_key


def attempt() -> int:
    """1 on a step's first attempt, 2 on the next, ... counted across crashes."""
    return _in_step("attempt").attempt


def heartbeat(details: Any = None) -> None:
    """Tell the engine a long step is alive, recording ``details`` as its progress.

    Raises :class:`WorkflowCancelled` once the run's lease was lost, so the step can stop early.
    """
    scope = _in_step("heartbeat")
    inv = scope.invocation
    if inv.lease_lost.is_set():
        raise WorkflowCancelled(f"run {inv.workflow_id!r} is no longer held by this worker")
    core = inv.core
    now = core.clock.time()
    if details is None and now - scope.last_beat < core.lease_seconds / 3:
        return
    scope.last_beat = now
    progress = core.codec.encode(details) if details is not None else None
    ok = core.store.record_progress(
        inv.workflow_id,
        owner=inv.owner,
        progress=progress,
        now=now,
        lease_until=now + core.lease_seconds,
    )
    if not ok:
        inv.lease_lost.set()
        raise WorkflowCancelled(f"run {inv.workflow_id!r} is no longer held by this worker")


def _journaled() -> Any:
    inv = CURRENT_RUN.get()
    return inv if inv is not None and CURRENT_STEP.get() is None else None


def now() -> _dt.datetime:
    """The current UTC time; inside a workflow it is recorded once and replayed identically."""
    inv = _journaled()
    if inv is None:
        return _dt.datetime.now(_dt.UTC)
    return inv.record_value(  # type: ignore[no-any-return]
        "now", lambda: _dt.datetime.fromtimestamp(inv.core.clock.time(), _dt.UTC)
    )


def uuid4() -> _uuid.UUID:
    """A random UUID; inside a workflow it is recorded once and replayed identically."""
    inv = _journaled()
    if inv is None:
        return _uuid.uuid4()
    return inv.record_value("uuid", _uuid.uuid4)  # type: ignore[no-any-return]


def random() -> float:
    """A float in [0, 1); inside a workflow it is recorded once and replayed identically."""
    inv = _journaled()
    if inv is None:
        return _random.random()
    return inv.record_value("random", _random.random)  # type: ignore[no-any-return]


def _waits_not_built(call: str) -> NoReturn:
    raise not_built(f"stalwart.{call}()", "durable waits, the next release")


def sleep(seconds: float | _dt.timedelta) -> None:
    """A durable timer (arrives with durable waits)."""
    _waits_not_built("sleep")


async def sleep_async(seconds: float | _dt.timedelta) -> None:
    """The async twin of :func:`sleep` (arrives with durable waits)."""
    _waits_not_built("sleep_async")


def wait_for_event(name: str, timeout: float | _dt.timedelta | None = None) -> Any:
    """Wait durably for an event sent to this run (arrives with durable waits)."""
    _waits_not_built("wait_for_event")


async def wait_for_event_async(name: str, timeout: float | _dt.timedelta | None = None) -> Any:
    """The async twin of :func:`wait_for_event` (arrives with durable waits)."""
    _waits_not_built("wait_for_event_async")


def request_approval(
    subject: str, details: Any = None, timeout: float | _dt.timedelta | None = None
) -> Any:
    """Wait durably for a human decision (arrives with durable waits)."""
    _waits_not_built("request_approval")


async def request_approval_async(
    subject: str, details: Any = None, timeout: float | _dt.timedelta | None = None
) -> Any:
    """The async twin of :func:`request_approval` (arrives with durable waits)."""
    _waits_not_built("request_approval_async")
