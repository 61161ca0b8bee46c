"""The schedule role of the store: schedules kept where every process of an app sees them.

A schedule row holds what its runs start (a workflow and its encoded arguments), when (a cron
expression in a time zone), what to do about ticks missed while no worker ran (its catch-up
policy), the last tick the fleet handled (started or skipped; at first, the time it was
declared), and ``next_due``: when a worker should next look at it (indexed, so a worker's look
for due schedules is one cheap query). ``revision`` counts declarations.

Handling a tick is one transaction (``advance_schedule``): the schedule's ``last_tick`` moves
forward only from the value the caller read (and under the declaration it read), and the
tick's run is created in the same transaction, so two workers racing for one tick never both
start it. The store stores; which tick comes next, and whether to start it, the caller decides
(``stalwart._cron``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .rows import Entry

__all__ = ["ScheduleRow", "ScheduleStore", "ScheduledRun"]


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule as stored."""

    name: str
    workflow: str
    cron: str
    timezone: str
    catch_up: str
    input: bytes
    last_tick: float  # the last tick handled, or the declaration time before the first
    next_due: float  # when a worker should look at the schedule next
    revision: int
    declared_at: float


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    """The run a tick starts: created ``pending`` with its first journal entry."""

    workflow_id: str
    name: str
    queue: str
    input: bytes
    now: float
    entry: Entry
    deadline: float | None = None


class ScheduleStore(Protocol):
    """Schedules, and the one transaction that handles a tick."""

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
        """Insert a schedule (its last tick: ``now``; due at ``next_due``), or update the one
        of that name, keeping its last tick and making it due at once (so a worker plans its
        next tick under the new declaration) and bumping its revision."""

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""

    def drop_schedule(self, name: str) -> bool:
        """Remove a schedule; ``False`` if there is none of that name."""

    def next_schedule_due(self, *, names: list[str]) -> float | None:
        """The earliest ``next_due`` of the schedules of these workflows."""

    def due_schedules(self, *, names: list[str], now: float) -> list[ScheduleRow]:
        """The schedules of these workflows due at ``now``, earliest first."""

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
        """In one transaction: move the schedule's last tick from ``last_tick`` (as read, under
        ``revision``) to ``tick`` and its ``next_due``, and create ``run`` (nothing if a run
        of its id exists). ``False``, with nothing written, when the schedule is gone or its
        last tick or revision are no longer those given (another worker handled the tick, or
        the schedule was declared again)."""
