"""Child runs: a parent starts one in the transaction that journals the start, finds its
children by index, and redrives them when it is retried. (A child's end wakes its parent
inside the transaction that ends it: ``finish_run`` and ``cancel_run``.)"""

from __future__ import annotations

from typing import Any

from ..base import Entry, RunRow
from ._base import SQLBase

__all__ = ["ChildVerbs"]


class ChildVerbs(SQLBase):
    """The ``ChildStore`` verbs over SQL."""

    def start_child(
        self,
        parent_id: str,
        entry: Entry,
        *,
        owner: str,
        workflow_id: str,
        name: str,
        queue: str,
        input: bytes,
        now: float,
        started: Entry,
        deadline: float | None = None,
        trace_context: str | None = None,
        detached: bool = False,
    ) -> str:
        """Create child run ``workflow_id`` (``pending``) and journal ``entry`` in its parent,
        in one transaction, while ``owner`` holds the parent's lease.

        ``"started"``; ``"exists"`` when the parent already owns a child of that id and
        workflow (the entry is journaled all the same); ``"taken"`` when another workflow or
        parent owns the id (nothing is written); ``"lost"`` without the parent's lease;
        ``"cancelling"`` when the parent is to be cancelled (nothing is written: a child
        started now would only be cancelled with it, after its first steps ran)."""

        def work(conn: Any) -> str:
            self._lock_run(conn, parent_id)
            held = {"workflow_id": parent_id, "owner": owner}
            parent = conn.execute(self._q["parent_held"], held).fetchone()
            if parent is None:
                return "lost"
            if parent[0]:
                return "cancelling"
            cur = conn.execute(
                self._q["create_child_run"],
                {
                    "workflow_id": workflow_id,
                    "name": name,
                    "queue": queue,
                    "input": self._stash(conn, input),
                    "now": now,
                    "deadline": deadline,
                    "trace_context": trace_context,
                    "parent_id": parent_id,
                    "detached": int(detached),
                },
            )
            if cur.rowcount == 1:
                verdict = "started"
                self._journal_in(conn, workflow_id, started)
            else:
                found = conn.execute(self._q["child_owner"], {"workflow_id": workflow_id})
                row = found.fetchone()
                if row is None or row[0] != name or row[1] != parent_id:
                    return "taken"
                verdict = "exists"
            self._journal_in(conn, parent_id, entry)
            return verdict

        return self._once(parent_id, entry, work)

    def child_runs(self, parent_id: str, *, attached: bool = False) -> list[RunRow]:
        """The children of run ``parent_id``, oldest first (``attached``: not the detached
        ones, which their parent's cancel and retry pass by)."""
        query = "attached_children" if attached else "child_runs"
        return self._records(query, {"parent_id": parent_id}, RunRow)
