"""A handle on one run, and how a caller waiting on it decides when to look again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from . import _inputs
from ._model import TERMINAL
from ._runtime import Runtime
from ._store import RunRow
from ._views import Views

__all__ = ["Handle"]


class Handle:
    """A reference to one run."""

    def __init__(self, workflow_id: str, *, views: Views, cancel: Callable[[str], None]) -> None:
        self.workflow_id = workflow_id
        self._views = views
        self._cancel = cancel

    def __repr__(self) -> str:
        return f"Handle({self.workflow_id!r})"

    def status(self) -> str:
        """The run's current status."""
        return self._views.row(self.workflow_id).status

    def result(self, timeout: float | None = None) -> Any:
        """Wait until the run is terminal and return its result (or raise its failure);
        :class:`TimeoutError` after ``timeout`` seconds (``None`` or ``inf``: no limit)."""
        timeout = _inputs.limit(timeout, "timeout", "result")
        deadline = None if timeout is None else time.monotonic() + timeout
        runtime = self._views.runtime
        watch = _Watch(runtime)
        while True:
            if watch.should_read():
                row = self._views.row(self.workflow_id)
                if self._finished(row, deadline, timeout):
                    return self._views.outcome(row)
            elif deadline is not None and time.monotonic() >= deadline:
                self._finished(self._views.row(self.workflow_id), deadline, timeout)
            pause = watch.pause(deadline)
            with runtime.settled:
                runtime.settled.wait_for(lambda: runtime.settled_count != watch.settled, pause)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like :meth:`result`, without blocking the event loop."""
        timeout = _inputs.limit(timeout, "timeout", "result_async")
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = _Watch(self._views.runtime)
        while True:
            if await asyncio.to_thread(watch.should_read):
                row = await asyncio.to_thread(self._views.row, self.workflow_id)
                if self._finished(row, deadline, timeout):
                    return self._views.outcome(row)
            elif deadline is not None and time.monotonic() >= deadline:
                row = await asyncio.to_thread(self._views.row, self.workflow_id)
                self._finished(row, deadline, timeout)
            await asyncio.sleep(watch.pause(deadline))

    def _finished(self, row: RunRow, deadline: float | None, timeout: float | None) -> bool:
        if row.status in TERMINAL:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run {self.workflow_id!r} is still {row.status} after {timeout}s")
        return False

    def cancel(self) -> None:
        """Cancel the run: at once if it waits, else at its next step boundary."""
        self._cancel(self.workflow_id)


class _Watch:
    """When a waiting caller looks at a run again.

    Pauses grow from 1 ms to 50 ms, cut short when a run of this process settles. After
    each, a change signal (a run this process settled, SQLite's ``data_version`` for other
    processes' commits, PostgreSQL's notifications) triggers a look; without one the caller
    looks anyway at intervals doubling from 1 ms to half a second, so a run is seen soon
    after it ends while a long wait stays cheap.
    """

    FIRST = 0.001
    LONGEST = 0.05
    IDLE = 0.5

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.delay = self.FIRST
        self.settled = -1
        self.version: int | None = None
        self.last_read = -self.IDLE
        self.read_every = 0.0

    def should_read(self) -> bool:
        """Whether the run may have changed since the last look."""
        now = time.monotonic()
        settled, version = self.runtime.settled_count, self.runtime.store.data_version()
        changed = version != self.version or settled != self.settled
        self.settled, self.version = settled, version
        if changed:
            self.last_read = now
            return True
        if now - self.last_read >= self.read_every:
            self.last_read = now
            self.read_every = min(max(self.read_every * 2, self.FIRST), self.IDLE)
            return True
        return False

    def pause(self, deadline: float | None) -> float:
        """The next pause, never past ``deadline``."""
        delay = self.delay
        self.delay = min(self.delay * 1.5, self.LONGEST)
        if deadline is None:
            return delay
        return min(delay, max(0.0, deadline - time.monotonic()))
