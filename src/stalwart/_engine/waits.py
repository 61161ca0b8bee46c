"""Durable waits: a timer, an event, an approval. A wait that cannot be satisfied now unwinds
the workflow with ``Suspend``; the run then holds no thread, task or lease until the store says
it may continue, and replay returns the recorded winner at the same position.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from typing import Any

from .. import _inputs
from .._keyring import open_text
from .._model import Approval, EntryKind, EntryStatus, from_epoch
from .._signals import LeaseLost, Suspend
from .._store import Entry
from .._store.base import ApprovalRow
from .invocation import Invocation, Recorded, guarded
from .observe import waited
from .streams import flush_stream

__all__ = ["approval", "event", "seconds_of", "sleep"]


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
    ) -> None:
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
        flush_stream(inv)  # what the run emitted is written before its wait is
        if approval is not None:
            inv.ties = True  # its end closes the approval if nobody decided it
        with inv.journaling():
            opened = inv.runtime.store.open_wait(
                inv.workflow_id, entry, owner=inv.owner, approval=approval
            )
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
    ) -> tuple[str, bytes | None]:
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
        with inv.journaling():
            decision = inv.runtime.store.resolve_wait(
                inv.workflow_id,
                entry,
                owner=inv.owner,
                event_name=event_name,
                approval_id=approval_id,
                time_out=time_out,
                now=self.now,
                encode_decision=lambda row: inv.runtime.codec.encode(
                    _decision(row, inv.runtime.codec.opener)
                ),
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


@guarded
def sleep(inv: Invocation, seconds: float) -> None:
    """A durable timer."""
    wait = _Wait(inv, EntryKind.SLEEP, "sleep")
    if wait.done:
        return
    if wait.rec is None:
        wait.open({"until": until_of(wait.now, seconds)})
    until = wait.spec()["until"]
    if until is not None and wait.now >= until:
        wait.decide(time_out=True)
        return
    raise wait.suspend(until, None)


@guarded
def event(inv: Invocation, name: str, timeout: float | None) -> Any:
    """The oldest unconsumed event ``name``, or ``None`` when ``timeout`` passes first."""
    wait = _Wait(inv, EntryKind.EVENT, name)
    if wait.done:
        assert wait.rec is not None
        return wait.inv.load_value(wait.rec)
    if wait.rec is None:
        wait.open({"until": until_of(wait.now, timeout)})
    until = wait.spec().get("until")
    expired = until is not None and wait.now >= until
    winner, data = wait.decide(time_out=expired, event_name=name, until=until)
    if winner == "event":
        return None if data is None else wait.decode_winner(data)
    if winner == "timer":
        return None
    raise wait.suspend(until, f"event:{name}")


@guarded
def approval(inv: Invocation, subject: str, details: Any, timeout: float | None) -> Approval | None:
    """A human decision on ``subject``, or ``None`` when ``timeout`` passes first."""
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
        wait.open(request_spec, approval=request, seq=seq)
    spec = wait.spec()
    until: float | None = spec.get("until")
    approval_id = str(spec["approval_id"])
    expired = until is not None and wait.now >= until
    winner, data = wait.decide(time_out=expired, approval_id=approval_id)
    if winner == "approval":
        assert data is not None
        return _approval_value(wait, wait.decode_winner(data))
    if winner == "timer":
        return None
    raise wait.suspend(until, f"approval:{approval_id}")
