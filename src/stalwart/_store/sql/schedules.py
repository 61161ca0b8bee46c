"""Schedules over SQL: declared, listed, dropped, found due, and ticks handled, each verb one
transaction; handling a tick moves the schedule's last tick by compare-and-set and creates the
tick's run in the same transaction."""

from __future__ import annotations

from typing import Any

from ..schedules import ScheduledRun, ScheduleRow
from ._base import SQLBase

__all__ = ["ScheduleVerbs"]


class ScheduleVerbs(SQLBase):
    """The ``ScheduleStore`` verbs over SQL."""

    def declare_schedule(
        self,
        name: str,
        *,
        workflow: str,
        cron: str,
        timezone: str,
        catch_up: str,
        input: bytes,
        now: float,
        next_due: float,
    ) -> None:
        """Insert the schedule, or update it keeping its last tick (then it is due now)."""
        params = {
            "name": name,
            "workflow": workflow,
            "cron": cron,
            "timezone": timezone,
            "catch_up": catch_up,
            "input": input,
            "now": now,
            "next_due": next_due,
        }
        self._write(lambda conn: conn.execute(self._q["declare_schedule"], params))

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        return self._records("list_schedules", {}, ScheduleRow)

    def drop_schedule(self, name: str) -> bool:
        """Remove a schedule; ``False`` if there is none of that name."""
        return self._changes("drop_schedule", {"name": name}) == 1

    def next_schedule_due(self, *, names: list[str]) -> float | None:
        """The earliest ``next_due`` of the schedules of these workflows."""
        rows = self._rows("next_schedule_due", {"names": self._list(names)})
        return float(rows[0][0]) if rows else None

    def due_schedules(self, *, names: list[str], now: float) -> list[ScheduleRow]:
        """The schedules of these workflows due at ``now``, earliest first."""
        params = {"names": self._list(names), "now": now}
        return self._records("due_schedules", params, ScheduleRow)

    def advance_schedule(
        self,
        name: str,
        *,
        revision: int,
        last_tick: float,
        tick: float,
        next_due: float,
        run: ScheduledRun | None,
    ) -> bool:
        """Move the last tick from ``last_tick`` to ``tick`` and create ``run``, in one
        transaction; ``False`` (nothing written) when another caller moved it first."""
        params = {
            "name": name,
            "revision": revision,
            "last_tick": last_tick,
            "tick": tick,
            "next_due": next_due,
        }

        def work(conn: Any) -> bool:
            if conn.execute(self._q["advance_schedule"], params).rowcount != 1:
                return False
            if run is not None:
                self._create_in(conn, run)
            return True

        if run is None:
            return self._write(work)
        # A commit whose acknowledgement is lost is found by the run's first entry on retry.
        return self._once(run.workflow_id, run.entry, work)

    def _create_in(self, conn: Any, run: ScheduledRun) -> None:
        """Inside a transaction: the tick's run, ``pending``, unless a run of its id exists."""
        created = conn.execute(
            self._q["create_run"],
            {
                "workflow_id": run.workflow_id,
                "name": run.name,
                "status": "pending",
                "queue": run.queue,
                "priority": 0,
                "input": self._stash(conn, run.input),
                "now": run.now,
                "owner": None,
                "lease_until": None,
                "deadline": run.deadline,
                "trace_context": None,
            },
        )
        if created.rowcount == 1:
            self._journal_in(conn, run.workflow_id, run.entry)
