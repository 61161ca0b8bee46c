"""Read models of the fleet: queues, workers and circuit breakers, as operators read them."""

from __future__ import annotations

import json

from ._model import BreakerState, QueueInfo, RunStatus, WorkerInfo, from_epoch
from ._runtime import Runtime
from ._store.base import ReadModelStore

__all__ = ["FleetViews"]


class FleetViews:
    """The fleet's reads of :class:`~stalwart._views.Views`."""

    runtime: Runtime

    @property
    def store(self) -> ReadModelStore:
        """The runtime's store as the read side may use it (its read roles only)."""
        return self.runtime.store

    def queues(self) -> list[QueueInfo]:
        store = self.store
        counts: dict[str, dict[str, int]] = {}
        for count in store.queue_counts():
            counts.setdefault(count.queue, {})[count.status] = count.runs
        declared = {q.name: q for q in store.list_queues()}
        return [
            QueueInfo(
                name=name,
                concurrency=declared[name].concurrency if name in declared else None,
                rate=declared[name].rate if name in declared else None,
                period=declared[name].period if name in declared else 1.0,
                pending=counts.get(name, {}).get(RunStatus.PENDING, 0),
                running=counts.get(name, {}).get(RunStatus.RUNNING, 0),
            )
            for name in sorted({*declared, *counts, *store.run_queues()})
        ]

    def workers(self) -> list[WorkerInfo]:
        runtime = self.runtime
        stale = runtime.clock.time() - 3 * runtime.lease_seconds
        return [
            WorkerInfo(
                id=w.id,
                host=w.host,
                pid=w.pid,
                queues=list(json.loads(w.queues)),
                started_at=from_epoch(w.started_at),  # type: ignore[arg-type]
                seen_at=from_epoch(w.seen_at),  # type: ignore[arg-type]
                running=w.running,
            )
            for w in self.store.list_workers(stale_before=stale)
        ]

    def breakers(self) -> list[BreakerState]:
        """Every breaker the fleet has counted a failure for, as it stands now."""
        now = self.runtime.clock.time()
        return [
            BreakerState(
                name=row.name,
                state=row.state,
                failures=row.failures,
                opened_at=from_epoch(row.opened_at),
                retry_at=from_epoch(row.probe_until if row.state == "half_open" else row.retry_at),
            )
            for row in self.store.list_breakers(now=now)
        ]
