"""Runs as rows: create, read, list, finish."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..base import Entry, NewRun, RunRow
from ..ingress import IngressCount
from ..payloads import INLINE_LIMIT
from ._base import _inline
from .ingress import count_accepted
from .pipeline import Pipelined, Write

__all__ = ["RunVerbs"]


class RunVerbs(Pipelined):
    """The ``RunStore`` verbs over SQL."""

    def create_run(
        self,
        *,
        workflow_id: str,
        name: str,
        status: str,
        queue: str,
        priority: int,
        input: bytes,
        now: float,
        owner: str | None,
        lease_until: float | None,
        entry: Entry,
        deadline: float | None = None,
        trace_context: str | None = None,
        count: IngressCount | None = None,
    ) -> bool:
        """Insert a run and its first journal entry; ``False`` if the id exists (with
        ``count``, counted as accepted in the same transaction)."""
        run = NewRun(
            workflow_id=workflow_id,
            name=name,
            status=status,
            queue=queue,
            priority=priority,
            input=input,
            now=now,
            owner=owner,
            lease_until=lease_until,
            entry=entry,
            deadline=deadline,
            trace_context=trace_context,
            count=count,
        )
        return bool(self._batched(self._creating(run)))

    def create_runs(self, runs: Sequence[NewRun]) -> list[bool]:
        """``create_run`` of each of ``runs``, queued together: one transaction takes them
        (each still ``False`` when its id exists), and this returns once it committed."""
        return [bool(created) for created in self._batched_all([self._creating(r) for r in runs])]

    def _creating(self, run: NewRun) -> Write:
        """The pipeline's write that creates ``run``."""
        count, entry, workflow_id = run.count, run.entry, run.workflow_id

        def insert(conn: Any, query: str = "create_run") -> Any:
            params = {
                "workflow_id": workflow_id,
                "name": run.name,
                "status": str(run.status),
                "queue": run.queue,
                "priority": run.priority,
                "input": self._stash(conn, run.input),
                "now": run.now,
                "owner": run.owner,
                "lease_until": run.lease_until,
                "deadline": run.deadline,
                "trace_context": run.trace_context,
            }
            return conn.execute(self._q[query], params)

        def work(conn: Any) -> bool:
            if insert(conn).rowcount != 1:
                return False
            self._journal_in(conn, workflow_id, entry)
            if count is not None:
                count_accepted(conn, self._q["count_ingress"], count, run.now)
            return True

        def send(conn: Any) -> bool:
            insert(conn, "create_run_ahead")
            self._journal_in(conn, workflow_id, entry)
            if count is not None:
                count_accepted(conn, self._q["count_ingress"], count, run.now)
            return True

        def alone() -> bool:
            if len(run.input) > INLINE_LIMIT or not _inline(entry):
                return self._once(workflow_id, entry, work)
            return self._once_ahead(workflow_id, entry, work, send, refused=False)

        return Write(workflow_id, work, alone)

    def get_run(self, workflow_id: str) -> RunRow | None:
        """The run, or ``None``."""
        rows = self._records("get_run", {"workflow_id": workflow_id}, RunRow)
        return rows[0] if rows else None

    def list_runs(
        self,
        *,
        status: str | None,
        name: str | None,
        limit: int,
        before: float | None,
        before_id: str | None = None,
        queue: str | None = None,
        since: float | None = None,
        parent_id: str | None = None,
    ) -> list[RunRow]:
        """Runs, newest first on ``(created_at, workflow_id)``, after ``(before, before_id)``;
        ``parent_id``: only the children of that run."""
        params = {
            "status": status,
            "name": name,
            "limit": limit,
            "before": before,
            "before_id": before_id,
            "queue": queue,
            "since": since,
            "parent_id": parent_id,
        }
        return self._records("list_runs", params, RunRow)

    def finish_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
        charged: Sequence[Entry] = (),
        ties: bool = True,
    ) -> bool:
        """Set the final status, release the lease, close pending approvals and journal it
        (after the ``charged`` attempts), in one transaction; ``ties=False`` skips the
        approvals and the parent (the caller knows there are none)."""
        write = self._finish_write(
            workflow_id,
            owner=owner,
            status=status,
            output=output,
            error=error,
            now=now,
            entry=entry,
            charged=charged,
            ties=ties,
        )
        return bool(self._batched(write))

    async def finish_run_async(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
        charged: Sequence[Entry] = (),
        ties: bool = True,
    ) -> bool:
        """``finish_run`` for a caller on an event loop, which goes on while the run's end
        waits for the transaction it shares with other writes to commit."""
        write = self._finish_write(
            workflow_id,
            owner=owner,
            status=status,
            output=output,
            error=error,
            now=now,
            entry=entry,
            charged=charged,
            ties=ties,
        )
        return bool(await self._batched_async(write))

    def _finish_write(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
        charged: Sequence[Entry],
        ties: bool,
    ) -> Write:
        """The pipeline's write of ``finish_run``."""
        inline = output is None or len(output) <= INLINE_LIMIT

        def update(conn: Any, query: str = "finish_run") -> Any:
            # The fenced UPDATE takes the run's row lock as it checks the lease (a lock taken
            # first would cost PostgreSQL a round trip for nothing); only a result stored
            # apart writes payloads first, so there the run is locked before them, as every
            # writer of a run does.
            if not inline:
                self._lock_run(conn, workflow_id)
            params = {
                "workflow_id": workflow_id,
                "owner": owner,
                "status": str(status),
                "output": output if inline else self._stash(conn, output, tree=True),
                "error": self._error_text(error),
                "now": now,
            }
            return conn.execute(self._q[query], params)

        def rest(conn: Any) -> None:
            for attempt in charged:
                self._journal_in(conn, workflow_id, attempt)
            self._journal_in(conn, workflow_id, entry)
            if not ties:
                return
            close = {"workflow_id": workflow_id, "now": now, "reason": f"run {status}"}
            conn.execute(self._q["close_approvals"], close)
            self._wake_parent(conn, workflow_id, now)

        def work(conn: Any) -> bool:
            if update(conn).rowcount != 1:
                return False
            rest(conn)
            return True

        def send(conn: Any) -> bool:
            update(conn, "finish_run_ahead")
            rest(conn)
            return True

        def alone() -> bool:
            if not inline or not all(map(_inline, [*charged, entry])):
                return self._once(workflow_id, entry, work)
            return self._once_ahead(workflow_id, entry, work, send, refused=False)

        def send_one(conn: Any) -> Callable[[], bool]:
            for attempt in charged:  # journaled only where the finish below is
                charge = self._entry_params(conn, workflow_id, attempt, owner)
                self._send_prepared(conn, "charge_in_batch", charge)
            params = {
                **self._entry_params(conn, workflow_id, entry, owner),
                "run_status": str(status),
                "run_output": output,
                "run_error": self._error_text(error),
                "now": now,
                "reason": f"run {status}",
                "waiting_for": f"child:{workflow_id}",
            }
            return self._send_prepared(conn, "finish_in_batch", params)

        # in a batch sent whole: one statement (its end's entry, approvals and parent hang
        # on the fenced update), after one for each charged attempt
        one = self._sends_batches and inline and all(map(_inline, [*charged, entry]))
        return Write(workflow_id, work, alone, send=send_one if one else None)
