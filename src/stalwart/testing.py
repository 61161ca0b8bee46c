"""Helpers for testing code built on stalwart."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._app import Stalwart
    from ._worker import Worker

__all__ = ["FakeClock", "worker"]


class FakeClock:
    """A clock that stands still until told to move; ``sleep`` jumps forward at once.

    Pass it as ``Stalwart(..., clock=FakeClock())`` so retry backoffs and recorded times take no
    wall-clock time in tests.
    """

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def time(self) -> float:
        """The current fake time in epoch seconds."""
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds`` without waiting, and remember the request."""
        with self._lock:
            self.slept.append(seconds)
            self._now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        with self._lock:
            self._now += seconds


def worker(
    app: Stalwart, *, concurrency: int | None = None, queues: list[str] | None = None
) -> Worker:
    """A worker of ``app`` to run in a thread of the test (``serve()``, then ``stop()``), like
    ``app.serve`` but stoppable without a signal."""
    from ._worker import Worker as _Worker

    return _Worker(app._driver, concurrency=concurrency, queues=queues)
