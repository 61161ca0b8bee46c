"""Events one run sends another (``stalwart.send_event`` in workflow code).

A send is one journaled call (``kind`` ``send``, named for the event): the transaction that
stores the event in the target's inbox also journals the send in the sender, fenced by the
sender's lease, so a crash leaves both or neither. Its dedup key defaults to the sender's id
and the send's position (the form of idempotency keys), so even a send whose commit landed
unacknowledged is not delivered twice. A replay returns what the send decided, or raises the
``WorkflowNotFound`` (or ``InvalidOperation``, for a target that ended) it recorded.
"""

from __future__ import annotations

import dataclasses
import logging

from .._errors import InvalidOperation, WorkflowNotFound
from .._model import EntryKind, EntryStatus, ErrorRecord
from .._runtime import Runtime
from .._signals import LeaseLost
from .._store import Entry
from .invocation import Invocation, Recorded, final_failure, guarded, step_key

__all__ = ["deliver", "send"]

log = logging.getLogger("stalwart")

_ERRORS: dict[str, type[Exception]] = {
    "WorkflowNotFound": WorkflowNotFound,
    "InvalidOperation": InvalidOperation,
}
_VERDICT_ERRORS = {"missing": "WorkflowNotFound", "ended": "InvalidOperation"}


def _replayed(inv: Invocation, rec: Recorded) -> bool:
    """What a recorded send decided: delivered or not, or the error it raised."""
    if rec.status == EntryStatus.FAILED:
        error = rec.error
        kind = _ERRORS.get(error.type) if error is not None else None
        if error is None or kind is None:
            raise inv.corrupt(rec, f"the recorded send failure {error!r} is not one a send raises")
        raise final_failure(inv, kind(error.message), rec.seq)
    value = inv.load_value(rec)
    if not isinstance(value, bool):
        raise inv.corrupt(rec, f"the recorded send outcome {value!r} is not a bool")
    return value


@guarded
def send(inv: Invocation, target: str, name: str, payload: bytes, dedup_key: str | None) -> bool:
    """Send event ``name`` to run ``target`` once, however often the sender replays:
    ``True`` if delivered, ``False`` if the target already had an event with the dedup key."""
    inv.check_alive()
    position = inv.next_position()
    rec = inv.lookup(position, EntryKind.SEND, name)
    if rec is not None:
        return _replayed(inv, rec)
    inv.recovering = False
    runtime = inv.runtime
    codec = runtime.codec
    key = step_key(inv.workflow_id, position) if dedup_key is None else dedup_key
    now = runtime.clock.time()
    entry = Entry(
        kind=EntryKind.SEND,
        name=name,
        status=EntryStatus.COMPLETED,
        seq=inv.alloc_seq(),
        position=position,
        attempt=1,
        started_at=now,
        finished_at=now,
        input=codec.encode({"workflow_id": target, "dedup_key": key}),
    )
    detail = {"name": name, "dedup_key": key, "from": inv.workflow_id}
    delivery = Entry.operator("send-event", now, by=inv.workflow_id, input=codec.encode(detail))

    written: list[Entry] = []  # the send as the store journaled it

    def outcome(verdict: str, message: str) -> Entry:
        if verdict in _VERDICT_ERRORS:
            error = ErrorRecord(_VERDICT_ERRORS[verdict], message, final=True)
            decided = dataclasses.replace(entry, status=EntryStatus.FAILED, error=error)
        else:
            decided = dataclasses.replace(entry, output=codec.encode(verdict == "delivered"))
        written.append(decided)
        return decided

    with inv.journaling():
        verdict = runtime.store.send_event(
            inv.workflow_id,
            entry,
            owner=inv.owner,
            workflow_id=target,
            name=name,
            payload=payload,
            dedup_key=key,
            now=now,
            delivery=delivery,
            outcome=outcome,
        )
    if verdict == "lost":
        inv.lease_lost.set()
        raise LeaseLost()
    log.info("run %s: event %r to run %s: %s", inv.workflow_id, name, target, verdict)
    if verdict == "delivered":
        runtime.wakeup.set()
    error = written[-1].error
    if error is not None:
        raise final_failure(inv, _ERRORS[error.type](error.message), entry.seq or 0)
    return verdict == "delivered"


def deliver(
    runtime: Runtime,
    sender: str,
    target: str,
    *,
    name: str,
    payload: bytes,
    dedup_key: str | None,
) -> bool:
    """``send_event`` inside a step: a plain delivery (not journaled; a retried step sends
    again, so pass a ``dedup_key``), recorded in the target as sent by run ``sender``."""
    now = runtime.clock.time()
    detail = {"name": name, "dedup_key": dedup_key, "from": sender}
    note = Entry.operator("send-event", now, by=sender, input=runtime.codec.encode(detail))
    try:
        delivered = runtime.store.deliver_event(
            target, name=name, payload=payload, dedup_key=dedup_key, now=now, entry=note
        )
    except KeyError:
        raise WorkflowNotFound(f"no run with workflow_id {target!r}") from None
    if delivered:
        runtime.wakeup.set()
    return delivered
