"""Claiming a run a notice named: PostgreSQL's ``wake_run`` names the run it woke, and an idle
worker takes that run at once instead of reading the claimable runs first.

The claim is ``take_lease``'s, narrowed to a suspended run (so it is a resume: no recovery to
count, no queue slot to check, since the worker only takes runs of queues without limits this
way) and sent ahead with its ``resumed`` entry, the run's replay read and the run's row: the
claim, the replay read and the row the worker needs are one round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..base import Entry, LeaseClaim, RunRow
from .pipeline import Pipelined

__all__ = ["WokenClaims"]

_REFUSED = LeaseClaim(taken=False)
_TAKEN = LeaseClaim(taken=True)


class WokenClaims(Pipelined):
    """``claim_woken`` over SQL."""

    def claim_woken(
        self, workflow_id: str, *, owner: str, now: float, lease_until: float, entry: Entry
    ) -> LeaseClaim:
        """Take the lease of a suspended, due, unheld run; journal its ``resumed`` entry.

        Done alone, not through the write pipeline's thread: a resume waits for no batch."""
        swap = {
            "workflow_id": workflow_id,
            "owner": owner,
            "expected_owner": None,
            "now": now,
            "lease_until": lease_until,
            "holder_gone": 0,
            "recoveries": 0,
            "recovery_mark": None,
        }
        read: list[Callable[[], list[Any] | None]] = []

        def work(conn: Any) -> LeaseClaim:
            read.clear()
            if not self._lock_run(conn, workflow_id, skip_locked=True):
                return _REFUSED  # another worker is claiming it right now
            state = conn.execute(self._q["run_state"], {"workflow_id": workflow_id}).fetchone()
            if state is None or state[0] != "suspended":
                return _REFUSED  # taken and left since the notice: the regular way decides
            if conn.execute(self._q["take_lease"], swap).rowcount != 1:
                return _REFUSED
            self._journal_in(conn, workflow_id, entry)
            return _TAKEN

        def send(conn: Any) -> LeaseClaim:
            read.clear()
            conn.execute(self._q["take_woken_ahead"], swap)
            self._journal_in(conn, workflow_id, entry)
            key = {"workflow_id": workflow_id}
            read.append(self._send_rows(conn, "replay_state", key))
            read.append(self._send_rows(conn, "get_run", key))
            return _TAKEN

        value: LeaseClaim | bool = self._once_ahead(
            workflow_id, entry, work, send, refused=_REFUSED
        )
        # ``True``: a retry found the entry journaled (the first try's COMMIT landed, its
        # answer lost): taken, and what was read with it is not known
        claim = value if isinstance(value, LeaseClaim) else _TAKEN if value else _REFUSED
        if not claim.taken or len(read) != 2:
            return claim
        replay, run = read[0](), read[1]()
        if replay is None or not run:
            return claim
        return LeaseClaim(True, replay=self._replay_of(replay), row=RunRow(*run[0]))
