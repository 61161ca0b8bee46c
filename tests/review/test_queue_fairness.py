"""A queue at its limit must not hide other queues' runs from a worker.

Found in review: the worker looked at the best few claimable runs across all its queues; when
those all belonged to a queue at its rate limit, runs of every other queue waited until that
queue drained.
"""

from __future__ import annotations

import threading

import stalwart
from stalwart._worker import Worker


def test_runs_of_other_queues_start_while_a_queue_waits_for_its_rate(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:
        app.queue("quota", rate=1, period=3600.0)

        @app.workflow(name="quoted", queue="quota")
        def quoted(i: int) -> int:
            return i

        @app.workflow(name="plain")
        def plain() -> str:
            return "ran"

        blocked = [app.start(quoted, i, priority=10) for i in range(40)]
        late = app.start(plain)  # newer and of lower priority than every quota run
        worker = Worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            assert late.result(timeout=20) == "ran"
            assert sum(h.status() == "completed" for h in blocked) == 1  # one start per hour
        finally:
            worker.stop()
            thread.join(timeout=30)
