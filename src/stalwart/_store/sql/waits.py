"""Durable waits: suspending a run, opening and resolving a wait, delivering events (the
approval requests are ``approvals.py``'s)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from ..._errors import InvalidOperation
from ..._model import RunStatus
from ..base import ApprovalRow, Entry, WaitDecision
from ..ingress import IngressCount
from ._base import SQLBase, _inline, _typed
from .ingress import count_accepted

__all__ = ["WaitVerbs"]

_NEVER_READS = frozenset({RunStatus.COMPLETED, RunStatus.CANCELLED})


class WaitVerbs(SQLBase):
    """The ``WaitStore`` verbs over SQL."""

    def suspend_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        wake_at: float | None,
        waiting_for: str | None,
        now: float,
        entry: Entry | None = None,
    ) -> bool:
        """Release the lease and suspend, unless what the run waits for is already there
        or unless the run is to be cancelled (a cancel that landed after its holder last
        looked: the holder goes on, sees the cancel and processes it, cancelling its children;
        a suspended run would sleep through it).

        A child's end locks the child's row, then its parent's, to wake it: a suspend on a
        child takes the same locks in the same order, so it sees that end or is woken by it."""
        kind, _, key = (waiting_for or "").partition(":")
        params = {
            "workflow_id": workflow_id,
            "owner": owner,
            "wake_at": wake_at,
            "waiting_for": waiting_for,
            "now": now,
            "event_name": key if kind == "event" else None,
            "approval_id": key if kind == "approval" else None,
            "breaker_name": key if kind == "breaker" else None,
            "child_id": key if kind == "child" else None,
        }

        def work(conn: Any) -> bool:
            if kind == "breaker":  # serialized with the breaker closing, which wakes waiters
                conn.execute(self._q["lock_breaker"], {"name": key})
            if kind == "child":  # serialized with the child ending, which wakes its parent
                self._lock_run(conn, key)
            self._lock_run(conn, workflow_id)
            if conn.execute(self._q["suspend_run"], params).rowcount != 1:
                return False
            if entry is not None:
                self._journal_in(conn, workflow_id, entry)
            return True

        return self._once(workflow_id, entry, work)

    def open_wait(
        self, workflow_id: str, entry: Entry, *, owner: str, approval: dict[str, Any] | None = None
    ) -> bool:
        """Journal a wait as scheduled (and its approval request), fenced by the lease."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            params = self._entry_params(conn, workflow_id, entry, owner)
            if conn.execute(self._q["append_entry_if_owner"], params).rowcount != 1:
                return False
            if approval is not None:
                conn.execute(self._q["create_approval"], {"workflow_id": workflow_id, **approval})
            return True

        return self._once(workflow_id, entry, work)

    def resolve_wait(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str,
        event_name: str | None = None,
        approval_id: str | None = None,
        time_out: bool = False,
        now: float = 0.0,
        encode_decision: Callable[[ApprovalRow], bytes] | None = None,
        until: float | None = None,
    ) -> WaitDecision:
        """Decide a wait in one transaction and journal the winner as ``entry`` completed.

        An event sent after ``until`` (the wait's timeout) does not count: the timer passed
        first, and the event stays in the inbox for a later wait.

        The oldest unconsumed event named ``event_name`` wins first (it is consumed and its
        payload becomes the output), then a decision on ``approval_id`` (``encode_decision``
        turns it into the output), then, when ``time_out`` is set, the timer (the
        pending approval is marked expired). The winner is ``"none"`` when nothing decided it
        yet, ``"lost"`` when the lease is gone or the wait was already decided.
        """

        # Where the backend sends statements before reading answers, the transaction is spelled
        # out, its BEGIN sent with the questions and its COMMIT with the writes.
        spelled = self._spells_transactions
        committing: list[WaitDecision] = []  # the decision whose COMMIT was last sent

        def work(conn: Any) -> WaitDecision:
            decision = decide(conn)
            if spelled and decision.winner in ("none", "lost"):
                conn.execute("COMMIT")  # (it wrote nothing)
            return decision

        def decide(conn: Any) -> WaitDecision:
            with self._pipelined(conn):  # the questions, one round trip
                if spelled:
                    conn.execute("BEGIN")
                self._send_lock_run(conn, workflow_id)
                held = conn.execute(
                    self._q["lease_held"], {"workflow_id": workflow_id, "owner": owner}
                )
                done = conn.execute(
                    self._q["seq_completed"], {"workflow_id": workflow_id, "seq": entry.seq}
                )
                key = {"workflow_id": workflow_id, "name": event_name, "until": until}
                oldest = None if event_name is None else conn.execute(self._q["oldest_event"], key)
            if held.fetchone() is None or done.fetchone():
                return WaitDecision("lost")
            decision, consume = WaitDecision("none"), None
            if oldest is not None:
                decision, consume = self._take_event(conn, oldest.fetchone(), entry)
            if decision.winner == "none" and approval_id is not None:
                key = {"workflow_id": workflow_id, "approval_id": approval_id}
                found = _typed(conn.execute(self._q["get_approval"], key), ApprovalRow)
                if found and found[0].decided_at is not None and found[0].approved is not None:
                    assert encode_decision is not None
                    decision = WaitDecision("approval", encode_decision(found[0]))
            if decision.winner == "none" and time_out:
                if approval_id is not None:
                    conn.execute(
                        self._q["expire_approval"],
                        {"workflow_id": workflow_id, "approval_id": approval_id, "now": now},
                    )
                decision = WaitDecision("timer")
            if decision.winner == "none":
                return decision
            decided = entry
            if decision.winner != "timer":
                decided = dataclasses.replace(entry, output=decision.data)
            # The event consumed and the winner journaled at once (unless a payload of the
            # entry is stored apart: storing it reads answers)
            with self._pipelined(conn) if _inline(decided) else nullcontext():
                if consume is not None:
                    conn.execute(self._q["consume_event"], consume)
                self._journal_in(conn, workflow_id, decided)
                if spelled:
                    committing[:] = [decision]
                    conn.execute("COMMIT")
            return decision

        if not spelled:
            return self._once(workflow_id, entry, work)
        decision = self._once(
            workflow_id, entry, lambda conn: self._spelled_out(conn, work), transaction=False
        )
        # A retry that found this call's entry journaled: the COMMIT last sent landed and its
        # answer was lost, so that try's decision is the one the store holds.
        if isinstance(decision, WaitDecision):
            return decision
        return committing[-1] if committing else WaitDecision("lost")

    def _take_event(
        self, conn: Any, found: Any, entry: Entry
    ) -> tuple[WaitDecision, dict[str, Any] | None]:
        """The oldest unconsumed event (``found``: ``oldest_event``'s row), if there is one,
        and what consumes it (``consume_event``'s parameters), done with the winner's journal
        entry."""
        if found is None:
            return WaitDecision("none"), None
        data = None if found[1] is None else self.load_payload(bytes(found[1]), conn)
        return WaitDecision("event", data), {"id": found[0], "seq": entry.seq}

    def deliver_event(
        self,
        workflow_id: str,
        *,
        name: str,
        payload: bytes | None,
        dedup_key: str | None,
        now: float,
        entry: Entry,
        count: IngressCount | None = None,
    ) -> bool:
        """Store an event in the run's inbox and wake the run if it waits for it.

        ``False`` when a previous event had the same ``dedup_key``; ``KeyError`` for an unknown
        run; :class:`InvalidOperation` for a new event to a completed or cancelled one (a
        failed run may still be redriven, and then read it)."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            delivered = self._deliver(
                conn,
                workflow_id,
                name=name,
                payload=payload,
                dedup_key=dedup_key,
                now=now,
                entry=entry,
            )
            if delivered and count is not None:  # counted with the event it delivered
                count_accepted(conn, self._q["count_ingress"], count, now)
            return delivered

        return self._once(workflow_id, entry, work)

    def _deliver(
        self,
        conn: Any,
        workflow_id: str,
        *,
        name: str,
        payload: bytes | None,
        dedup_key: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Inside a transaction that locked run ``workflow_id``: store the event, journal
        ``entry`` in the run and wake it (see :meth:`deliver_event`)."""
        run = conn.execute(self._q["get_run"], {"workflow_id": workflow_id}).fetchone()
        if run is None:
            raise KeyError(workflow_id)
        if run[2] in _NEVER_READS:  # the row is locked: its status cannot change under us
            seen = {"workflow_id": workflow_id, "dedup_key": dedup_key}
            if dedup_key is not None and conn.execute(self._q["event_delivered"], seen).fetchone():
                return False  # a webhook's late repeat is a duplicate, not a mistake
            raise InvalidOperation(
                f"run {workflow_id!r} is {run[2]}: it will never read event {name!r} "
                "(check the workflow id)"
            )
        cur = conn.execute(
            self._q["insert_event"],
            {
                "workflow_id": workflow_id,
                "name": name,
                "payload": self._stash(conn, payload),
                "dedup_key": dedup_key,
                "now": now,
                "by": entry.by,
            },
        )
        if cur.rowcount != 1:
            return False
        self._journal_in(conn, workflow_id, entry)
        conn.execute(
            self._q["wake_run"],
            {"workflow_id": workflow_id, "now": now, "waiting_for": f"event:{name}"},
        )
        return True
