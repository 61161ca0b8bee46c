"""Operator actions on runs: cancel, redrive, fork."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._model import ErrorRecord, RunStatus
from ..base import ChildRedrive, Entry, ForkCandidate
from ._base import SQLBase

__all__ = ["AdminVerbs"]


class _Changed(Exception):
    """Rolls back a retry one of whose children changed meanwhile."""


class AdminVerbs(SQLBase):
    """The ``AdminStore`` verbs over SQL."""

    def cancel_run(self, workflow_id: str, *, now: float, error: ErrorRecord, entry: Entry) -> str:
        """Cancel at once a run nobody executes (journaling ``entry`` and the run's end);
        else flag it for its holder (journaling ``entry``).

        Returns ``"cancelled"``, ``"requested"`` or ``"finished"`` (nothing to cancel)."""

        def work(conn: Any) -> str:
            self._lock_run(conn, workflow_id)
            text = self._error_text(error.to_json())
            params = {"workflow_id": workflow_id, "now": now, "error": text}
            key = {"workflow_id": workflow_id, "now": now}
            if conn.execute(self._q["cancel_waiting_run"], params).rowcount == 1:
                verdict = "cancelled"
                close = {"workflow_id": workflow_id, "now": now, "reason": "run cancelled"}
                conn.execute(self._q["close_approvals"], close)
                self._wake_parent(conn, workflow_id, now)
            elif conn.execute(self._q["cancel_to_roll_back"], key).rowcount == 1:
                verdict = "requested"  # its compensations run first: the next executor does it
            elif conn.execute(self._q["request_cancel"], key).rowcount == 1:
                verdict = "requested"
            else:
                return "finished"
            self._journal_in(conn, workflow_id, entry)
            if verdict == "cancelled":  # it ended here: its journal says so, as a holder's end
                end = Entry.ended("cancelled", now, output=None, error=error)
                self._journal_in(conn, workflow_id, end)
            return verdict

        return self._once(workflow_id, entry, work)

    def redrive(
        self,
        workflow_id: str,
        *,
        now: float,
        entries: list[Entry],
        children: Sequence[ChildRedrive] = (),
    ) -> bool:
        """Make a failed or needs_attention run pending again, journaling ``entries`` (the
        resets and the operator action), and reopen ``children`` with theirs, all in one
        transaction: a precondition that fails anywhere rolls back the whole retry."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            params = {"workflow_id": workflow_id, "now": now}
            if conn.execute(self._q["redrive_run"], params).rowcount != 1:
                return False
            for entry in entries:
                self._journal_in(conn, workflow_id, entry)
            for child in children:
                self._lock_run(conn, child.workflow_id)
                key = {"workflow_id": child.workflow_id, "parent_id": child.parent_id, "now": now}
                if conn.execute(self._q["redrive_child"], key).rowcount != 1:
                    raise _Changed()
                for entry in child.entries:
                    self._journal_in(conn, child.workflow_id, entry)
            return True

        try:
            return self._once(workflow_id, entries[-1] if entries else None, work)
        except _Changed:
            return False

    def fork_candidates(self, workflow_id: str) -> list[ForkCandidate]:
        """The positioned journal rows a fork may reuse, in order."""
        return self._records("fork_candidates", {"workflow_id": workflow_id}, ForkCandidate)

    def fork_run(
        self,
        source: str,
        *,
        new_id: str,
        name: str,
        queue: str,
        input: bytes | None,
        now: float,
        reuse: list[int],
        started: Entry,
        by: str,
        notes: Entry,
    ) -> bool:
        """Create run ``new_id`` whose journal reuses rows ``reuse`` of ``source`` (their
        payloads are shared, not copied); ``False`` if ``new_id`` exists."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, source)
            cur = conn.execute(
                self._q["create_run"],
                {
                    "workflow_id": new_id,
                    "name": name,
                    "status": RunStatus.PENDING,
                    "queue": queue,
                    "priority": 0,
                    "input": input,
                    "now": now,
                    "owner": None,
                    "lease_until": None,
                    "deadline": None,
                    "trace_context": None,  # a fork is a new run, of no caller's trace
                },
            )
            if cur.rowcount != 1:
                return False
            self._journal_in(conn, new_id, started)
            for row_id in reuse:
                conn.execute(
                    self._q["copy_entry_reused"], {"new_id": new_id, "by": by, "id": row_id}
                )
            self._journal_in(conn, source, notes)
            return True

        return self._once(new_id, started, work)
