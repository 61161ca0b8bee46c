"""What operators read about the fleet: run counts, declared queues, live workers."""

from __future__ import annotations

import dataclasses
import math

from ..base import CountRow, LiveNameRow, QueueRow, StatsRows, UsageRow, WorkerRow
from ._base import SQLBase

__all__ = ["ReadVerbs"]


class ReadVerbs(SQLBase):
    """The ``ReadStore`` verbs over SQL."""

    def count_runs(
        self,
        *,
        status: str | None,
        name: str | None,
        queue: str | None,
        since: float | None,
        parent_id: str | None = None,
    ) -> int:
        """How many runs match."""
        params = {
            "status": status,
            "name": name,
            "queue": queue,
            "since": since,
            "parent_id": parent_id,
        }
        return int(self._rows("count_runs", params)[0][0])

    def run_counts(self) -> list[CountRow]:
        """How many runs each queue has in each status."""
        return self._records("run_counts", {}, CountRow)

    def queue_counts(self) -> list[CountRow]:
        """How many pending and running runs each queue has."""
        return self._records("queue_counts", {}, CountRow)

    def run_queues(self) -> list[str]:
        """Every queue some run uses, whatever the run's status."""
        return [str(row[0]) for row in self._rows("run_queues", {})]

    def step_usage(self, workflow_id: str) -> list[UsageRow]:
        """What each step attempt of a run used, in order, without reading payloads; its
        ``in_doubt`` entries too."""
        return self._records("step_usage", {"workflow_id": workflow_id}, UsageRow)

    def declare_queue(
        self, name: str, *, concurrency: int | None, rate: int | None, period: float, now: float
    ) -> None:
        """Record a queue's limits as an app declared them."""
        params = {
            "name": name,
            "concurrency": concurrency,
            "rate": rate,
            "period": period,
            "now": now,
        }
        self._write(lambda conn: conn.execute(self._q["declare_queue"], params))

    def list_queues(self) -> list[QueueRow]:
        """Every declared queue, by name."""
        return self._records("list_queues", {}, QueueRow)

    def beat_worker(self, worker: WorkerRow) -> None:
        """Insert or refresh a worker's row."""
        params = dataclasses.asdict(worker)
        params["now"] = params.pop("seen_at")
        self._write(lambda conn: conn.execute(self._q["beat_worker"], params))

    def drop_worker(self, worker_id: str) -> None:
        """A worker stopped: remove its row."""
        self._changes("drop_worker", {"id": worker_id})

    def list_workers(self, *, stale_before: float) -> list[WorkerRow]:
        """The workers seen since ``stale_before`` (older rows are dropped)."""
        self._changes("drop_stale_workers", {"before": stale_before})
        return self._records("list_workers", {}, WorkerRow)

    def live_run_names(self) -> list[LiveNameRow]:
        """How many runs that have not ended each queue has of each workflow name."""
        return self._records("live_run_names", {}, LiveNameRow)

    def run_stats(self, *, since: float, width: float) -> StatsRows:
        """The overview of the runs since ``since``: runs created and ended per bucket of
        ``width`` seconds, step attempts and their latency by step, spend by workflow."""
        window = {"since": since, "width": width}
        return StatsRows(
            started=[(int(b), int(n)) for b, n in self._rows("stats_started", window)],
            finished=[(int(b), str(s), int(n)) for b, s, n in self._rows("stats_finished", window)],
            steps=self._step_stats(since),
            workflows=[
                (str(name), int(n), int(i), int(o), float(c))
                for name, n, i, o, c in self._rows("stats_workflows", {"since": since})
            ],
        )

    def _step_stats(self, since: float) -> list[tuple[str, int, int, float | None, float | None]]:
        """Attempts, failures, p50 and p95 by step name. An in-doubt attempt not yet settled
        counts as an attempt (not a failure); an attempt with no real duration (interrupted
        before its holder was seen alive, or settled by an operator) is counted but not timed.
        The percentiles are the nearest rank of every timed attempt up to SAMPLE of them in the
        window; past that, of an evenly spread sample of about SAMPLE (every k-th by id), and of
        every attempt of a step the sample would leave with fewer than RARE (so a rare step is
        never guessed from a few)."""
        counts = self._rows("stats_steps", {"since": since})
        timed = sum(int(row[3]) for row in counts)
        every = max(1, math.ceil(timed / SAMPLE))
        took: dict[str, list[float]] = {}
        query = {"since": since, "every": every, "name": None}
        for name, seconds in self._rows("stats_step_times", query):
            took.setdefault(name, []).append(float(seconds))
        if every > 1:
            for row in counts:
                if int(row[3]) // every < RARE:
                    exact = {"since": since, "every": 1, "name": row[0]}
                    took[row[0]] = [float(t) for _, t in self._rows("stats_step_times", exact)]
        tally = {str(name): [int(n), int(bad)] for name, n, bad, _, _ in counts}
        if any(int(row[4]) for row in counts):  # rare: ask which are not settled yet
            for name, attempts in self._rows("stats_steps_in_doubt", {"since": since}):
                tally[str(name)][0] += int(attempts)  # an attempt, not a failure
        out = []
        for name, (attempts, failures) in sorted(tally.items()):
            ranked = sorted(took.get(name, ()))
            out.append((name, attempts, failures, _rank(ranked, 50), _rank(ranked, 95)))
        return out


SAMPLE = 10_000  # timed attempts read for the percentiles before sampling
RARE = 500  # a step sampled below this many is read whole


def _rank(ordered: list[float], percent: int) -> float | None:
    """The nearest-rank ``percent`` percentile of ``ordered`` (``None`` when empty): the value
    at rank ceil(percent / 100 * n), in integers."""
    if not ordered:
        return None
    return ordered[(percent * len(ordered) + 99) // 100 - 1]
