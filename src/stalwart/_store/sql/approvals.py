"""Approval requests: reading them, and deciding one, which wakes its run."""

from __future__ import annotations

from typing import Any

from ..._keyring import seal_text
from ..base import ApprovalRow, Entry
from ._base import SQLBase

__all__ = ["ApprovalVerbs"]


class ApprovalVerbs(SQLBase):
    """The store's approval requests (a run opens one through ``WaitVerbs.open_wait``)."""

    def get_approval(self, workflow_id: str, approval_id: str) -> ApprovalRow | None:
        """One approval request."""
        key = {"workflow_id": workflow_id, "approval_id": approval_id}
        rows = self._records("get_approval", key, ApprovalRow)
        return rows[0] if rows else None

    def approvals_of(self, workflow_ids: list[str]) -> list[ApprovalRow]:
        """Every approval request of these runs, in one read."""
        if not workflow_ids:
            return []
        params = {"ids": self._list(list(dict.fromkeys(workflow_ids)))}
        return self._records("approvals_of_runs", params, ApprovalRow)

    def list_approvals(self, *, pending: bool, workflow_id: str | None = None) -> list[ApprovalRow]:
        """Approval requests, oldest first."""
        # an optional condition, so the undecided ones are read through approvals_pending
        params = {"pending": 1 if pending else None, "workflow_id": workflow_id}
        return self._records("list_approvals", params, ApprovalRow)

    def count_pending_approvals(self) -> int:
        """How many approval requests are undecided."""
        return int(self._rows("count_pending_approvals", {})[0][0])

    def decide_approval(
        self,
        workflow_id: str,
        approval_id: str,
        *,
        approved: bool,
        by: str,
        reason: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Store a decision on a pending request and wake its run; ``False`` if decided."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            cur = conn.execute(
                self._q["decide_approval"],
                {
                    "workflow_id": workflow_id,
                    "approval_id": approval_id,
                    "now": now,
                    "approved": int(approved),
                    "by": by,
                    "reason": reason
                    if reason is None or self.keyring is None
                    else seal_text(self.keyring, reason),
                },
            )
            if cur.rowcount != 1:
                return False
            self._journal_in(conn, workflow_id, entry)
            conn.execute(
                self._q["wake_run"],
                {"workflow_id": workflow_id, "now": now, "waiting_for": f"approval:{approval_id}"},
            )
            return True

        return self._once(workflow_id, entry, work)
