"""A worker serving an app in a thread of the test, stopped (and joined) when the block ends:
what tests that drive runs through a real worker share."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import stalwart
from stalwart import testing
from stalwart._worker import Worker

STOP_S = 15.0  # generous bound for a stop that should take milliseconds


@contextmanager
def serving(
    app: stalwart.Stalwart, *, concurrency: int = 8, queues: list[str] | None = None
) -> Iterator[Worker]:
    """A worker serving ``app`` in a thread; stopped (and joined) when the block ends."""
    worker = testing.worker(app, concurrency=concurrency, queues=queues)
    thread = threading.Thread(target=worker.serve, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=STOP_S)
        if thread.is_alive():
            raise AssertionError("the worker thread did not stop")
