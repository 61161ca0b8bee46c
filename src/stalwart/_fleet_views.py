"""Read models of the fleet: queues, workers and circuit breakers, as operators read them."""

from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Any

from ._errors import UsageError
from ._model import BreakerState, QueueInfo, RunStatus, WorkerInfo, from_epoch
from ._runtime import Runtime
from ._store.base import ReadModelStore

__all__ = ["ENDED", "WINDOWS", "FleetViews"]

# The overview's windows: (seconds, width of a bucket); the last bucket holds now.
WINDOWS = {"1h": (3600, 300), "24h": (86_400, 3600), "7d": (7 * 86_400, 6 * 3600)}
ENDED = ("completed", "failed", "cancelled")


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

    def stats(self, window: str) -> dict[str, Any]:
        """What the console's overview draws for ``window`` (``1h``, ``24h`` or ``7d``), as
        ``GET /api/v1/stats`` answers it: runs created and ended per bucket, step attempts,
        failures and latency by step, runs and spend by workflow (runs created in the window,
        with what they have spent so far), and each queue's pending and running runs now."""
        if window not in WINDOWS:
            raise UsageError(f"window={window!r}: pass one of {', '.join(WINDOWS)}")
        seconds, width = WINDOWS[window]
        count = seconds // width
        since = (math.floor(self.runtime.clock.time() / width) - count + 1) * width
        rows = self.store.run_stats(since=since, width=width)
        started = [0] * count
        finished: list[dict[str, int]] = [dict.fromkeys(ENDED, 0) for _ in range(count)]
        for i, runs in rows.started:
            if 0 <= i < count:
                started[i] = runs
        for i, status, runs in rows.finished:
            if 0 <= i < count:
                finished[i][status] = runs
        buckets = [
            {"start": iso_epoch(since + i * width), "started": started[i], "finished": finished[i]}
            for i in range(count)
        ]
        return {
            "window": window,
            "buckets": buckets,
            "steps": [
                {
                    "name": name,
                    "attempts": n,
                    "failures": bad,
                    "p50_ms": _ms(p50),
                    "p95_ms": _ms(p95),
                }
                for name, n, bad, p50, p95 in rows.steps
            ],
            "workflows": [
                {
                    "name": name,
                    "runs": n,
                    "input_tokens": given,
                    "output_tokens": out,
                    "cost": round(cost, 6),
                }
                for name, n, given, out, cost in rows.workflows
            ],
            "queues": [
                {"name": q.name, "pending": q.pending, "running": q.running} for q in self.queues()
            ],
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def iso_epoch(epoch: float) -> str:
    """An epoch time as ISO 8601 in UTC."""
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).isoformat()
