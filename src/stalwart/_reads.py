"""The read side of the public API: what an app, the CLI, the console and the metrics read
about runs and the fleet. Each method checks its arguments and asks ``_views``."""

from __future__ import annotations

from typing import Any

from . import _answers
from ._model import (
    ApprovalRequest,
    BreakerState,
    JournalEntry,
    QueueInfo,
    RunDetail,
    Usage,
    WorkerInfo,
    WorkflowInfo,
)
from ._views import Views

__all__ = ["Reads"]


class Reads:
    """The read methods of :class:`~stalwart.Stalwart`."""

    _views: Views

    def list_workflows(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        before: Any = None,
        *,
        queue: str | None = None,
        since: Any = None,
        parent_id: str | None = None,
    ) -> list[WorkflowInfo]:
        """Runs, newest first. To page back, pass the last run of a page (its
        :class:`WorkflowInfo`) as ``before``, exact even when runs share a creation time, or a
        time (a datetime or epoch seconds). ``since`` keeps runs created at or after a time;
        ``parent_id`` keeps the child runs of that run."""
        return self._views.list_workflows(
            status, name, limit, before, queue=queue, since=since, parent_id=parent_id
        )

    def _list_waiting(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        before: Any = None,
        *,
        queue: str | None = None,
        since: Any = None,
        parent_id: str | None = None,
    ) -> list[tuple[WorkflowInfo, str | None]]:
        """:meth:`list_workflows` with ``describe().waiting_for`` of each run, read with the
        page (for the CLI's and the console's run lists)."""
        return self._views.list_waiting(
            status, name, limit, before, queue=queue, since=since, parent_id=parent_id
        )

    def count_workflows(
        self,
        status: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        since: Any = None,
        *,
        parent_id: str | None = None,
    ) -> int:
        """How many runs match, with the filters of :meth:`list_workflows` (``parent_id``:
        the child runs of that run)."""
        return self._views.count_workflows(status, name, queue, since, parent_id)

    def describe(self, workflow_id: str) -> RunDetail:
        """The run as an operator sees it: what it waits on, the step it executes now (name,
        attempt, start, last heartbeat, holder) and its usage."""
        return self._views.describe(workflow_id)

    def usage(self, workflow_id: str) -> Usage:
        """The run's usage: tokens, cost and step attempts, failed attempts included."""
        return self._views.usage(workflow_id)

    def journal(
        self, workflow_id: str, *, after: int | None = None, limit: int | None = None
    ) -> list[JournalEntry]:
        """The run's audit trail: every step, attempt and lifecycle event, in order. Each entry
        carries its ``id``, which grows with every entry of the store: pass the last one you
        have as ``after`` for only the entries since (read through the run's index, so a poll
        costs what is new), and ``limit`` for at most that many.

        Entries are only ever appended, but on PostgreSQL an id is taken when an entry is
        written and a concurrent writer of the same run may commit a lower one later: one who
        holds ``n`` entries and reads ``m`` more has all of them when ``n + m`` is
        :meth:`journal_size`, read after them, and reads the whole journal again when not."""
        return self._views.journal(workflow_id, after, limit)

    def _journal_json(
        self, workflow_id: str, after: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`journal` as the HTTP API answers it (``entry_json`` of each entry), built
        from the stored rows without the typed entries in between."""
        return _answers.journal_json(self._views, workflow_id, after, limit)

    def journal_size(self, workflow_id: str) -> int:
        """How many entries the run's journal has (one count through its index)."""
        return self._views.journal_size(workflow_id)

    def approvals(self, pending: bool = True) -> list[ApprovalRequest]:
        """Approval requests, oldest first; only undecided ones unless ``pending=False``."""
        return self._views.approvals(pending)

    def _approvals_json(self, pending: bool = True) -> list[dict[str, Any]]:
        """:meth:`approvals` as the HTTP API answers them (``approval_json`` of each), built
        from the stored rows without the typed values in between."""
        return _answers.approvals_json(self._views, pending)

    def _pending_approvals(self) -> int:
        """How many approval requests are undecided (one count, for the console's navigation)."""
        return self._views.pending_approvals()

    def _stats_json(self, window: str = "24h") -> dict[str, Any]:
        """What the console's overview draws for ``window`` (``1h``, ``24h``, ``7d``), as
        ``GET /api/v1/stats`` answers it."""
        return self._views.stats(window)

    def breakers(self) -> list[BreakerState]:
        """The fleet's circuit breakers that have counted a failure, by name."""
        return self._views.breakers()

    def queues(self) -> list[QueueInfo]:
        """Every queue apps declared or runs use, with its limits and its pending and running
        runs, fleet-wide."""
        return self._views.queues()

    def workers(self) -> list[WorkerInfo]:
        """The worker processes serving this store, as their renewals last left them (a
        worker not seen for three lease periods is dropped)."""
        return self._views.workers()
