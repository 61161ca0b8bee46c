"""Durable waits: a timer, an event, an approval. A wait that cannot be satisfied now unwinds
the workflow with ``Suspend``; the run then holds no thread, task or lease until the store says
it may continue, and replay returns the recorded winner at the same position.

Each wait is written once, as a flow (``flows.py``) that yields its store writes (opening the
wait, deciding it) and is given back what each decided: a sync workflow's driver makes them in
its own thread, an async workflow's awaits them made by a thread of the engine's, so the event
loop that the app's async runs share goes on while a wait's write waits for the database.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
from collections.abc import Callable
from typing import Any

from .. import _inputs
from .._keyring import open_text
from .._model import Approval, EntryKind, EntryStatus, from_epoch
from .._signals import LeaseLost, Suspend
from .._store import Entry
from .._store.base import ApprovalRow
from .flows import Flow, drive, drive_async
from .invocation import Invocation, Recorded, guarded, guarded_async
from .observe import waited
from .streams import flush_stream

__all__ = [
    "approval",
    "approval_async",
    "event",
    "event_async",
    "seconds_of",
    "sleep",
    "sleep_async",
]


# Times past the last second a datetime can hold (9999-12-31): a wait that long has no end.
_FOREVER = 253_402_300_799.0


def seconds_of(value: float | _dt.timedelta | None, what: str) -> float | None:
    """Seconds in a number or timedelta (``inf`` for ``float('inf')``, ``timedelta.max`` and
    anything too large to be a time); refuses NaN, negative and non-numeric values with a
    :class:`UsageError` (a ``ValueError``)."""
    return None if value is None else _inputs.seconds(value, what, unlimited=True)


def until_of(now: float, seconds: float | None) -> float | None:
    """When a wait of ``seconds`` that begins at ``now`` ends; ``None`` for never."""
    if seconds is None:
        return None
    until = now + seconds
    return until if until < _FOREVER else None


class _Wait:
    """The shared life of a wait: find or open its journal entry, decide it, or suspend."""

    def __init__(self, inv: Invocation, kind: EntryKind, name: str) -> None:
        inv.check_alive()
        self.inv = inv
        self.kind = kind
        self.name = name
        self.position = inv.next_position()
        self.rec: Recorded | None = inv.lookup(self.position, kind, name)
        self.now = inv.runtime.clock.time()

    @property
    def done(self) -> bool:
        return self.rec is not None and self.rec.status == EntryStatus.COMPLETED

    def spec(self) -> dict[str, Any]:
        """The wait's recorded spec: when it times out (``until``), and which approval."""
        rec = self.rec
        assert rec is not None
        if rec.input is None:
            raise self.inv.corrupt(rec, "the open wait has no recorded spec")
        value = self.inv.decode_recorded(rec, "spec", rec.input)
        until = value.get("until") if isinstance(value, dict) else None
        if not isinstance(value, dict) or not (
            until is None
            or (
                isinstance(until, int | float)
                and not isinstance(until, bool)
                and not math.isnan(until)
            )
        ):
            raise self.inv.corrupt(rec, f"the recorded spec {value!r} does not say when it ends")
        if self.kind == EntryKind.APPROVAL and not isinstance(value.get("approval_id"), str | int):
            raise self.inv.corrupt(rec, f"the recorded spec {value!r} names no approval")
        return value

    def decode_winner(self, data: bytes) -> Any:
        """The payload of what ended the wait (an event, a decision), decoded."""
        assert self.rec is not None
        return self.inv.decode_recorded(self.rec, "payload of what ended the wait", data)

    def open(
        self,
        spec: dict[str, Any],
        approval: dict[str, Any] | None = None,
        seq: int | None = None,
    ) -> Flow[None]:
        """Journal the wait as scheduled (with its approval request)."""
        inv = self.inv
        seq = inv.alloc_seq() if seq is None else seq
        entry = Entry(
            kind=self.kind,
            name=self.name,
            status=EntryStatus.SCHEDULED,
            seq=seq,
            position=self.position,
            started_at=self.now,
            input=inv.runtime.codec.encode(spec),
        )
        if approval is not None:
            inv.ties = True  # its end closes the approval if nobody decided it
        opened = yield functools.partial(_write_open, inv, entry, approval)
        if not opened:
            inv.lease_lost.set()
            raise LeaseLost()
        inv.recovering = False
        self.rec = Recorded(
            seq,
            self.position,
            self.kind,
            self.name,
            EntryStatus.SCHEDULED,
            0,
            None,
            None,
            entry.input,
        )

    def decide(
        self,
        *,
        time_out: bool,
        event_name: str | None = None,
        approval_id: str | None = None,
        until: float | None = None,
    ) -> Flow[tuple[str, bytes | None]]:
        """End the wait if it can end now: its winner (``none``: it waits on) and payload."""
        assert self.rec is not None
        inv = self.inv
        entry = Entry(
            kind=self.kind,
            name=self.name,
            status=EntryStatus.COMPLETED,
            seq=self.rec.seq,
            position=self.position,
            started_at=self.now,
            finished_at=self.now,
        )
        decision = yield functools.partial(
            _write_decision,
            inv,
            entry,
            event_name=event_name,
            approval_id=approval_id,
            time_out=time_out,
            now=self.now,
            until=until,
        )
        winner, data = decision.winner, decision.data
        if winner == "lost":
            inv.lease_lost.set()
            raise LeaseLost()
        if winner != "none":
            waited(inv, self.kind, self.name, self.now, winner)
        return winner, data

    def suspend(self, wake_at: float | None, waiting_for: str | None) -> Suspend:
        waited(self.inv, self.kind, self.name, self.now, "suspended")
        return self.inv.suspend(wake_at=wake_at, waiting_for=waiting_for)


def _decision(row: ApprovalRow, opener: Callable[[bytes], bytes] | None) -> dict[str, Any]:
    return {
        "approved": bool(row.approved),
        "by": row.by,
        "reason": open_text(opener, row.reason),
        "decided_at": from_epoch(row.decided_at),
    }


def _approval_value(wait: _Wait, value: Any) -> Approval:
    """The recorded decision as an :class:`Approval`; ``CorruptRecord`` if it is not one."""
    try:
        if isinstance(value, dict):
            return Approval(**value)
    except (TypeError, ValueError):
        pass
    assert wait.rec is not None
    raise wait.inv.corrupt(wait.rec, f"the recorded decision {value!r} is not an approval")


def _write_open(inv: Invocation, entry: Entry, approval: dict[str, Any] | None) -> bool:
    """(A wait's write) The run's waiting stream chunks, then the wait's ``scheduled`` entry
    and its approval request, fenced by the lease: whether it held."""
    flush_stream(inv)  # what the run emitted is written before its wait is
    with inv.journaling():
        return inv.runtime.store.open_wait(
            inv.workflow_id, entry, owner=inv.owner, approval=approval
        )


def _write_decision(inv: Invocation, entry: Entry, **how: Any) -> Any:
    """(A wait's write) The wait's ``completed`` entry, if what it waits for came or its time
    is up; the store's decision."""
    codec = inv.runtime.codec
    with inv.journaling():
        return inv.runtime.store.resolve_wait(
            inv.workflow_id,
            entry,
            owner=inv.owner,
            encode_decision=lambda row: codec.encode(_decision(row, codec.opener)),
            **how,
        )


def _sleep(inv: Invocation, seconds: float) -> Flow[None]:
    wait = _Wait(inv, EntryKind.SLEEP, "sleep")
    if wait.done:
        return
    if wait.rec is None:
        yield from wait.open({"until": until_of(wait.now, seconds)})
    until = wait.spec()["until"]
    if until is not None and wait.now >= until:
        yield from wait.decide(time_out=True)
        return
    raise wait.suspend(until, None)


def _event(inv: Invocation, name: str, timeout: float | None) -> Flow[Any]:
    wait = _Wait(inv, EntryKind.EVENT, name)
    if wait.done:
        assert wait.rec is not None
        return wait.inv.load_value(wait.rec)
    if wait.rec is None:
        yield from wait.open({"until": until_of(wait.now, timeout)})
    until = wait.spec().get("until")
    expired = until is not None and wait.now >= until
    winner, data = yield from wait.decide(time_out=expired, event_name=name, until=until)
    if winner == "event":
        return None if data is None else wait.decode_winner(data)
    if winner == "timer":
        return None
    raise wait.suspend(until, f"event:{name}")


def _approval(
    inv: Invocation, subject: str, details: Any, timeout: float | None
) -> Flow[Approval | None]:
    wait = _Wait(inv, EntryKind.APPROVAL, subject)
    if wait.done:
        assert wait.rec is not None
        value = wait.inv.load_value(wait.rec)
        return None if value is None else _approval_value(wait, value)
    if wait.rec is None:
        expires = until_of(wait.now, timeout)
        seq = inv.alloc_seq()
        approval_id = str(seq)
        request_spec: dict[str, Any] = {"approval_id": approval_id, "until": expires}
        request = {
            "approval_id": approval_id,
            "subject": subject,
            "details": inv.runtime.codec.encode(details),
            "now": wait.now,
            "expires_at": expires,
        }
        yield from wait.open(request_spec, approval=request, seq=seq)
    spec = wait.spec()
    until: float | None = spec.get("until")
    approval_id = str(spec["approval_id"])
    expired = until is not None and wait.now >= until
    winner, data = yield from wait.decide(time_out=expired, approval_id=approval_id)
    if winner == "approval":
        assert data is not None
        return _approval_value(wait, wait.decode_winner(data))
    if winner == "timer":
        return None
    raise wait.suspend(until, f"approval:{approval_id}")


@guarded
def sleep(inv: Invocation, seconds: float) -> None:
    """A durable timer."""
    drive(_sleep(inv, seconds))


@guarded_async
async def sleep_async(inv: Invocation, seconds: float) -> None:
    """:func:`sleep` in an ``async def`` workflow."""
    await drive_async(inv, _sleep(inv, seconds))


@guarded
def event(inv: Invocation, name: str, timeout: float | None) -> Any:
    """The oldest unconsumed event ``name``, or ``None`` when ``timeout`` passes first."""
    return drive(_event(inv, name, timeout))


@guarded_async
async def event_async(inv: Invocation, name: str, timeout: float | None) -> Any:
    """:func:`event` in an ``async def`` workflow."""
    return await drive_async(inv, _event(inv, name, timeout))


@guarded
def approval(inv: Invocation, subject: str, details: Any, timeout: float | None) -> Approval | None:
    """A human decision on ``subject``, or ``None`` when ``timeout`` passes first."""
    return drive(_approval(inv, subject, details, timeout))


@guarded_async
async def approval_async(
    inv: Invocation, subject: str, details: Any, timeout: float | None
) -> Approval | None:
    """:func:`approval` in an ``async def`` workflow."""
    return await drive_async(inv, _approval(inv, subject, details, timeout))
