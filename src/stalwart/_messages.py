"""Messages between runs (docs/coordinating-agents.md): ``stalwart.send_event`` sends an event
to another run from workflow code, journaled so that it is delivered exactly once however
often the sender replays; inside a step it is a plain delivery."""

from __future__ import annotations

from typing import Any

from . import _inputs
from ._engine import messages as _messages
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP
from ._errors import SerializationError, UsageError
from ._serde import UnsupportedValue

__all__ = ["send_event"]


def _check(workflow_id: Any, name: Any, dedup_key: Any) -> None:
    if not isinstance(workflow_id, str) or not workflow_id:
        raise UsageError(
            f"stalwart.send_event(workflow_id={workflow_id!r}): pass the target run's id, "
            "a non-empty str"
        )
    _inputs.name(workflow_id, "workflow_id", "stalwart.send_event")
    if not isinstance(name, str) or not name:
        raise UsageError(
            f"stalwart.send_event(name={name!r}): pass the event's name, a non-empty str"
        )
    _inputs.name(name, "name", "stalwart.send_event")
    if dedup_key is not None:
        if not isinstance(dedup_key, str) or not dedup_key:
            raise UsageError(
                f"stalwart.send_event(dedup_key={dedup_key!r}): pass a non-empty str, or None "
                "for the sender's id and position"
            )
        _inputs.name(dedup_key, "dedup_key", "stalwart.send_event")


def send_event(
    workflow_id: str, name: str, payload: Any = None, dedup_key: str | None = None
) -> bool:
    """Send event ``name`` with ``payload`` to run ``workflow_id`` (its
    ``wait_for_event(name)`` receives it); ``True`` if delivered, ``False`` if the run already
    had an event with ``dedup_key``.

    In workflow code the send is journaled (``kind`` ``send``) in the transaction that
    delivers it, and its ``dedup_key`` defaults to this run's id and the send's position, so
    it is delivered exactly once however often this run replays. ``WorkflowNotFound`` for an
    unknown run (``InvalidOperation`` for one that completed or was cancelled) is recorded and
    raised again on replay. Inside a step it is a plain delivery: a retried step sends again,
    so pass a ``dedup_key`` there. Outside a run, use ``app.send_event(...)``."""
    _check(workflow_id, name, dedup_key)
    scope = CURRENT_STEP.get()
    inv = scope.invocation if scope is not None else CURRENT_RUN.get()
    if inv is None:
        raise RuntimeError(
            "stalwart.send_event() can only be called inside a workflow or step; outside a "
            "run use app.send_event(...)"
        )
    try:
        payload_bytes = inv.runtime.codec.encode(payload)
    except UnsupportedValue as exc:
        raise SerializationError(
            f"run {inv.workflow_id!r}: stalwart.send_event({name!r}): cannot serialize a "
            f"payload value of type {exc.type_name} at "
            f"{exc.path.replace('value', 'payload', 1)}"
        ) from None
    if scope is None:
        return _messages.send(inv, workflow_id, name, payload_bytes, dedup_key)
    with inv.journaling():
        return _messages.deliver(
            inv.runtime,
            inv.workflow_id,
            workflow_id,
            name=name,
            payload=payload_bytes,
            dedup_key=dedup_key,
        )
