"""How an idle worker learns of new work: a change signal (SQLite's data_version, PostgreSQL's
NOTIFY), with a regular poll behind it for a signal that never came."""

from __future__ import annotations

import threading

import stalwart
from stalwart import testing
from stalwart.testing import store_of


def test_polling_finds_new_work_when_every_wake_up_signal_is_missed(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app, stalwart.Stalwart(shared_url) as client:
        # The worker's app never sees a change signal: only its regular poll is left.
        store_of(app).data_version = lambda: 0  # type: ignore[method-assign]
        store_of(app).changes.subscribe = lambda callback: None  # type: ignore[method-assign]

        @app.workflow(name="job")
        def job(n: int) -> int:
            stalwart.sleep(0.2)  # a timer too, due while nothing signals it
            return n + 1

        @client.workflow(name="job")
        def job_client(n: int) -> int:
            raise AssertionError("runs on the worker")

        worker = testing.worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            # Started from another app: nothing in the worker's own process nudges it either.
            handles = [client.start(job_client, i) for i in range(3)]
            assert [h.result(timeout=20) for h in handles] == [1, 2, 3]
        finally:
            worker.stop()
            thread.join(timeout=30)
