"""Where schedules fire: every worker looks for due schedules and starts their ticks.

A worker asks the store for the earliest ``next_due`` of its workflows' schedules twice a
second (one indexed query) and keeps it; only when the clock passes it does it read the due
schedules and handle their ticks, each one transaction (``advance_schedule``) that moves the
schedule's last tick by compare-and-set and creates the tick's run. Of workers racing for one
tick exactly one wins; the others find it handled. The claim loop's hot path pays one
comparison per turn.

Which ticks came due while a worker ran is read from the rows (``app.workers()``) of the
workers that serve the schedule's workflow: a row shows that its worker ran from its start
until its last refresh, and no longer (a worker killed without stopping leaves a row that
outlives it, and what it started before it died is in the schedule's last tick). A tick after
the last refresh of a row that may still be refreshed (one seen within ``lease_seconds``)
waits until the row is refreshed past it or goes stale; the asking worker runs from its own
start until now. Pure decisions live in
``_cron.plan``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from datetime import UTC, datetime

from ._cron import plan, tick_run_id
from ._engine.lifecycle import lifecycle
from ._runtime import Runtime
from ._store.base import ScheduledRun, ScheduleRow, WorkerRow

__all__ = ["Ticker"]

log = logging.getLogger("stalwart")

LOOK_SECONDS = 0.5  # how often a worker asks when its schedules are next due
Span = tuple[float, float]  # from, to: epoch seconds
MAX_ADVANCES = 100  # ticks one schedule handles per turn of the loop (a long backlog: more turns)


class Ticker:
    """Fires the due schedules of one worker's workflows; ``started_at``: when the worker
    started (the start of the span it has been running)."""

    def __init__(self, runtime: Runtime, started_at: float = 0.0) -> None:
        self.runtime = runtime
        self.started_at = started_at
        self._due: float | None = None
        self._next_look = 0.0

    @property
    def names(self) -> list[str]:
        """The workflows whose schedules this worker fires: the ones its app registers."""
        return sorted(self.runtime.registry.workflows)

    def poll(self, started_at: float, wait: float) -> float:
        """Handle what is due (cheap when nothing is: called on every turn of the loop);
        returns how long the loop may wait, ``wait`` or less when a tick comes sooner."""
        self.started_at = started_at
        mono = time.monotonic()
        if mono >= self._next_look:
            self._next_look = mono + LOOK_SECONDS
            self._due = self._ask()
        if self._due is None:
            return wait
        until = self._due - self.runtime.clock.time()
        if until > 0:
            return min(wait, until)
        try:
            moved = self.fire()
        except Exception:  # the store is away, say: the next look tries again
            log.warning("worker %s: firing schedules failed", self.runtime.owner, exc_info=True)
            self._due = None
            return wait
        self._due = self._ask()
        if self._due is None or self._due > self.runtime.clock.time():
            return wait
        if not moved:  # a tick waits for another worker's row to tell: ask at the next look
            self._due = None
            return wait
        return 0.0  # a long backlog: the next turn goes on with it

    def leave(self, started_at: float) -> None:
        """The worker stops: start every tick that came due while it ran (once its row is
        gone, nothing shows that it ran), then drop its row (one left behind ages out)."""
        if started_at > 0:  # it served
            self.started_at = started_at
            try:
                self.fire()
            except Exception:
                log.warning("worker %s: firing schedules failed", self.runtime.owner, exc_info=True)
        with contextlib.suppress(Exception):
            self.runtime.store.drop_worker(self.runtime.owner)

    def _ask(self) -> float | None:
        try:
            return self.runtime.store.next_schedule_due(names=self.names)
        except Exception:
            log.warning("worker %s: reading schedules failed", self.runtime.owner, exc_info=True)
            return None

    def fire(self) -> bool:
        """Handle the ticks of every schedule due now; ``False`` when none moved."""
        store = self.runtime.store
        now = self.runtime.clock.time()
        due = store.due_schedules(names=self.names, now=now)
        if not due:
            return False
        rows = store.list_workers(stale_before=now - 3 * self.runtime.lease_seconds)
        moved = False
        for row in due:
            watched, unsure = self._watched(rows, row.workflow, now)
            moved = self._handle(row, now, watched, unsure) or moved
        return moved

    def _watched(
        self, rows: list[WorkerRow], workflow: str, now: float
    ) -> tuple[list[Span], list[Span]]:
        """When workers that serve ``workflow`` ran: each one's row from its start to its
        last refresh, and this worker's own span until now; and when they may have run: after
        the last refresh of a row seen within a lease (a live worker refreshes it every third
        of one). A row without workflows (an older release's) serves every workflow."""
        lease = self.runtime.lease_seconds
        serving = [w for w in rows if w.workflows is None or workflow in json.loads(w.workflows)]
        watched = [(w.started_at, w.seen_at) for w in serving]
        unsure = [
            (max(w.started_at, w.seen_at), math.inf)
            for w in serving
            if w.id != self.runtime.owner and w.seen_at >= now - lease
        ]
        return [*watched, (self.started_at, math.inf)], unsure

    def _handle(
        self, row: ScheduleRow, now: float, watched: list[Span], unsure: list[Span]
    ) -> bool:
        """Handle one schedule's due ticks; ``False`` when none moved."""
        wf = self.runtime.registry.workflows.get(row.workflow)
        if wf is None:
            return False
        moved = False
        for _ in range(MAX_ADVANCES):
            step = plan(
                cron=row.cron,
                timezone=row.timezone,
                catch_up=row.catch_up,
                last_tick=row.last_tick,
                next_due=row.next_due,
                now=now,
                watched=watched,
                unsure=unsure,
            )
            if step is None:
                return moved
            wid = tick_run_id(row.name, step.tick)
            run = (
                ScheduledRun(
                    workflow_id=wid,
                    name=wf.name,
                    queue=wf.queue,
                    input=row.input,
                    now=now,
                    entry=lifecycle("started", now, input=row.input),
                    deadline=None if wf.timeout is None else now + wf.timeout,
                )
                if step.start
                else None
            )
            if not self.runtime.store.advance_schedule(
                row.name,
                revision=row.revision,
                last_tick=row.last_tick,
                tick=step.tick,
                next_due=step.next_due,
                run=run,
            ):
                return moved  # another worker handled it, or it was declared again: look again
            moved = True
            self._log(row, step.tick, run, skipped_from=row.last_tick)
            row = dataclasses.replace(row, last_tick=step.tick, next_due=step.next_due)
            if step.next_due > now:
                return moved
        return moved

    def _log(
        self, row: ScheduleRow, tick: float, run: ScheduledRun | None, *, skipped_from: float
    ) -> None:
        if run is not None:
            self.runtime.wakeup.set()  # this worker may claim it at once
            log.info("schedule %s: started %s", row.name, run.workflow_id)
        elif tick != skipped_from:
            when = datetime.fromtimestamp(tick, UTC).isoformat()
            log.info(
                "schedule %s: skipped the ticks missed while no worker ran, up to %s (catch_up=%r)",
                row.name,
                when,
                row.catch_up,
            )
