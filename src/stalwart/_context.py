"""Calls made inside workflows and steps; they read the ambient run from ``contextvars``."""

from __future__ import annotations

import datetime as _dt
import math
import random as _random
import time
import uuid as _uuid
from typing import Any
from urllib.parse import quote

from . import _inputs
from ._engine import streams as _streams
from ._engine import waits as _waits
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, StepScope
from ._engine.patches import patched as _patched
from ._errors import InvalidOperation, UsageError, WorkflowCancelled, WorkflowOnlyCall
from ._model import Approval, EntryKind

__all__ = [
    "attempt",
    "emit",
    "heartbeat",
    "idempotency_key",
    "now",
    "patched",
    "random",
    "request_approval",
    "request_approval_async",
    "request_headers",
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


def emit(data: Any, *, stream: str = "default") -> None:
    """Append ``data`` (any value the app's codec encodes: typically a ``str`` text delta or
    a small dict) to this run's stream ``stream``, inside a step or workflow code. Chunks are
    written in batches, within about 25 ms (see docs/streams.md). It rarely waits for the
    store: in sync workflow code right after a step, whose outcome it commits first, and
    while 8 MiB of the run's chunks wait unwritten."""
    scope = CURRENT_STEP.get()
    inv = scope.invocation if scope is not None else CURRENT_RUN.get()
    if inv is None:
        raise InvalidOperation(
            "stalwart.emit() can only be called inside a workflow or a step; read a run's "
            "stream with app.stream(workflow_id)"
        )
    _streams.emit(inv, scope, data, stream)


def idempotency_key() -> str:
    """A key unique to this step call in this run, identical on every retry and recovery."""
    return _in_step("idempotency_key").idempotency_key


def request_headers() -> dict[str, str]:
    """HTTP headers naming this run and step, for an SDK's ``extra_headers``: the provider's
    logs (or a payment service) then see who called, and the ``Idempotency-Key`` is this step
    call's :func:`idempotency_key`, the same on every retry. Only inside a step."""
    scope = CURRENT_STEP.get()
    if scope is None:
        raise InvalidOperation(
            "stalwart.request_headers() can only be called inside a step, where the call it "
            "tags is made"
        )
    return {
        "X-Stalwart-Run-Id": _header_value(scope.invocation.workflow_id),
        "X-Stalwart-Step": _header_value(scope.name),
        "Idempotency-Key": _header_value(scope.idempotency_key),
    }


# A heartbeat whose answer came late writes again, this many times at most (see heartbeat).
BEATS_FOR_A_PROMPT_ANSWER = 5
# Printable ASCII but ``%``: what an HTTP client sends as it is in a header value.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def _header_value(text: str) -> str:
    """``text`` as HTTP clients accept it in a header: a character outside printable ASCII
    (``é``, a control character) or ``%`` percent-encoded as UTF-8 (``commande-%C3%A9``);
    ``urllib.parse.unquote`` gives the text back."""
    return quote(text, safe=_HEADER_SAFE)


def attempt() -> int:
    """1 on a step's first attempt, 2 on the next, ... counted across crashes."""
    return _in_step("attempt").attempt


def record_usage(
    input_tokens: int = 0, output_tokens: int = 0, cost: float = 0.0, model: str | None = None
) -> None:
    """Add to what the current step attempt used; it is journaled with the attempt's outcome,
    failed attempts included. A result with a ``usage`` (OpenAI, Anthropic, pydantic-ai) is
    recorded without this call; ``cost`` comes from the app's ``prices`` when not given."""
    scope = _in_step("record_usage")
    for label, count in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise UsageError(f"record_usage({label}={count!r}): pass a count, an int >= 0")
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf:
        raise UsageError(f"record_usage(cost={cost!r}): pass a finite number >= 0")
    if model is not None and (not isinstance(model, str) or not model):
        raise UsageError(f"record_usage(model={model!r}): pass the model's name, or None")
    spent = scope.usage
    spent["input_tokens"] = spent.get("input_tokens", 0) + input_tokens
    spent["output_tokens"] = spent.get("output_tokens", 0) + output_tokens
    spent["cost"] = spent.get("cost", 0.0) + float(cost)
    if model is not None:
        spent["model"] = model


def heartbeat(details: Any = None) -> None:
    """Tell the engine a long step is alive, recording ``details`` as its progress.

    Raises :class:`WorkflowCancelled` once the run's lease was lost, so the step can stop early.
    """
    scope = _in_step("heartbeat")
    inv = scope.invocation
    if inv.lease_lost.is_set():
        raise WorkflowCancelled(f"run {inv.workflow_id!r} is no longer held by this worker")
    if inv.cancel_requested.is_set():
        raise WorkflowCancelled(f"run {inv.workflow_id!r} was cancelled")
    runtime = inv.runtime
    now = runtime.clock.time()
    if details is None and now - scope.last_beat < runtime.lease_seconds / 3:
        return
    progress = runtime.codec.encode(details) if details is not None else None
    for _ in range(BEATS_FOR_A_PROMPT_ANSWER):
        sent = time.monotonic()
        with inv.journaling():  # a store failure stops the run like any other journaling
            ok = runtime.store.record_progress(
                inv.workflow_id,
                owner=inv.owner,
                progress=progress,
                now=now,
                lease_until=now + runtime.lease_seconds,
            )
        if not ok:
            inv.lease_lost.set()
            raise WorkflowCancelled(f"run {inv.workflow_id!r} is no longer held by this worker")
        scope.last_beat = now
        # An answer that took a third of the lease may be stale: the process was paused (or
        # cut off) while it was on the way, and another worker may hold the run by now. The
        # step acts on the heartbeat at once, so it asks again until an answer is prompt.
        if time.monotonic() - sent < runtime.lease_seconds / 3:
            return
        now = runtime.clock.time()


def _journaled() -> Any:
    inv = CURRENT_RUN.get()
    return inv if inv is not None and CURRENT_STEP.get() is None else None


def now() -> _dt.datetime:
    """The current UTC time; inside a workflow it is recorded once and replayed identically."""
    inv = _journaled()
    if inv is None:
        return _dt.datetime.now(_dt.UTC)
    return inv.record_value(  # type: ignore[no-any-return]
        EntryKind.NOW, lambda: _dt.datetime.fromtimestamp(inv.runtime.clock.time(), _dt.UTC)
    )


def uuid4() -> _uuid.UUID:
    """A random UUID; inside a workflow it is recorded once and replayed identically."""
    inv = _journaled()
    if inv is None:
        return _uuid.uuid4()
    return inv.record_value(EntryKind.UUID, _uuid.uuid4)  # type: ignore[no-any-return]


def random() -> float:
    """A float in [0, 1); inside a workflow it is recorded once and replayed identically."""
    inv = _journaled()
    if inv is None:
        return _random.random()
    return inv.record_value(EntryKind.RANDOM, _random.random)  # type: ignore[no-any-return]


def _workflow_for_wait(call: str, *, is_async: bool) -> Any:
    if CURRENT_STEP.get() is not None:
        raise WorkflowOnlyCall(
            f"stalwart.{call}() was called inside a step; waits belong in workflow code"
        )
    inv = CURRENT_RUN.get()
    if inv is None:
        raise RuntimeError(f"stalwart.{call}() can only be called inside a workflow")
    if inv.is_async and not is_async:
        raise TypeError(
            f"stalwart.{call}() blocks; in an async def workflow use "
            f"'await stalwart.{call}_async(...)'"
        )
    if is_async and not inv.is_async:
        raise TypeError(
            f"stalwart.{call}_async() is for async def workflows; call stalwart.{call}() here"
        )
    return inv


def sleep(seconds: float | _dt.timedelta) -> None:
    """Wait durably: the run holds no thread or lease until the timer fires, across restarts.

    ``float('inf')`` (or ``timedelta.max``) sleeps until the run is cancelled; NaN and negative
    values raise ``ValueError`` before anything is recorded."""
    inv = _workflow_for_wait("sleep", is_async=False)
    _waits.sleep(inv, _waits.seconds_of(seconds, "seconds") or 0.0)


async def sleep_async(seconds: float | _dt.timedelta) -> None:
    """The async twin of :func:`sleep`, for ``async def`` workflows."""
    inv = _workflow_for_wait("sleep", is_async=True)
    await _waits.sleep_async(inv, _waits.seconds_of(seconds, "seconds") or 0.0)


def wait_for_event(name: str, timeout: float | _dt.timedelta | None = None) -> Any:
    """The payload of the oldest unconsumed event ``name`` sent to this run, or ``None`` if
    ``timeout`` passes first (``None``, ``float('inf')`` and ``timedelta.max``: no timeout).
    Events sent before the wait are kept."""
    inv = _workflow_for_wait("wait_for_event", is_async=False)
    return _waits.event(inv, _event_name(name), _waits.seconds_of(timeout, "timeout"))


async def wait_for_event_async(name: str, timeout: float | _dt.timedelta | None = None) -> Any:
    """The async twin of :func:`wait_for_event`."""
    inv = _workflow_for_wait("wait_for_event", is_async=True)
    return await _waits.event_async(inv, _event_name(name), _waits.seconds_of(timeout, "timeout"))


def request_approval(
    subject: str, details: Any = None, timeout: float | _dt.timedelta | None = None
) -> Approval | None:
    """Record a pending approval, wait durably for a person's decision, and return it
    (``None`` if ``timeout`` passes first)."""
    inv = _workflow_for_wait("request_approval", is_async=False)
    return _waits.approval(inv, _subject(subject), details, _waits.seconds_of(timeout, "timeout"))


async def request_approval_async(
    subject: str, details: Any = None, timeout: float | _dt.timedelta | None = None
) -> Approval | None:
    """The async twin of :func:`request_approval`."""
    inv = _workflow_for_wait("request_approval", is_async=True)
    timeout_s = _waits.seconds_of(timeout, "timeout")
    return await _waits.approval_async(inv, _subject(subject), details, timeout_s)


def _event_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"event name {name!r}: pass a non-empty str")
    return _inputs.name(name, "name", "wait_for_event")


def _subject(subject: str) -> str:
    if not isinstance(subject, str) or not subject:
        raise ValueError(f"approval subject {subject!r}: pass a non-empty str")
    return _inputs.text(subject, "subject", "request_approval")  # a label for people


def patched(patch_id: str) -> bool:
    """Whether this run takes the new code of patch ``patch_id`` at this point: ``True`` for a
    run that reaches it with code that has the patch (recorded in the journal, kind
    ``patch``), ``False`` on the replay of a run that went past it before the patch existed.
    Old and new runs both replay deterministically; see docs/changing-code.md."""
    if not isinstance(patch_id, str) or not patch_id:
        raise ValueError(f"patch id {patch_id!r}: pass a non-empty str, e.g. 'check-facts'")
    _inputs.name(patch_id, "patch_id", "patched")
    if CURRENT_STEP.get() is not None:
        raise WorkflowOnlyCall(
            "stalwart.patched() was called inside a step; patch points belong in workflow code"
        )
    inv = CURRENT_RUN.get()
    if inv is None:
        raise RuntimeError("stalwart.patched() can only be called inside a workflow")
    return _patched(inv, patch_id)
