"""Messages between runs: a workflow's ``send_event`` delivers the event to its target and
journals the send in the sender, in one transaction fenced by the sender's lease, so a crash
leaves both or neither (and the target's dedup key makes a resend after a lost
acknowledgement a duplicate, not a second event)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._errors import InvalidOperation
from ..base import Entry
from .waits import WaitVerbs

__all__ = ["MessageVerbs"]


class MessageVerbs(WaitVerbs):
    """The ``MessageStore`` verb over SQL."""

    def send_event(
        self,
        sender_id: str,
        entry: Entry,
        *,
        owner: str,
        workflow_id: str,
        name: str,
        payload: bytes | None,
        dedup_key: str,
        now: float,
        delivery: Entry,
        outcome: Callable[[str, str], Entry],
    ) -> str:
        """Deliver event ``name`` to run ``workflow_id`` and journal the send in run
        ``sender_id`` while ``owner`` holds its lease, in one transaction.

        ``entry`` is the send as journaled; the sender's row is ``outcome(verdict,
        message)``, that entry with what the send decided. The verdict: ``"delivered"``,
        ``"duplicate"`` (the target had an event with ``dedup_key``), ``"missing"`` (no such
        run), ``"ended"`` (completed or cancelled: it will never read it) or ``"lost"`` (the
        sender's lease; nothing is written); ``delivery`` is journaled in the target when the
        event is stored."""

        def work(conn: Any) -> str:
            for run in sorted({sender_id, workflow_id}):  # one order: no deadlock between two
                self._lock_run(conn, run)
            held = {"workflow_id": sender_id, "owner": owner}
            if conn.execute(self._q["lease_held"], held).fetchone() is None:
                return "lost"
            message = ""
            try:
                delivered = self._deliver(
                    conn,
                    workflow_id,
                    name=name,
                    payload=payload,
                    dedup_key=dedup_key,
                    now=now,
                    entry=delivery,
                )
                verdict = "delivered" if delivered else "duplicate"
            except KeyError:
                verdict, message = "missing", f"no run with workflow_id {workflow_id!r}"
            except InvalidOperation as exc:
                verdict, message = "ended", str(exc)
            self._journal_in(conn, sender_id, outcome(verdict, message))
            return verdict

        return self._once(sender_id, entry, work)
