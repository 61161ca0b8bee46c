"""A handle on one run, and how a caller waiting on it decides when to look again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from . import _inputs
from ._model import TERMINAL
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
        changes = self._views.runtime.store.changes
        rereads = _Rereads()
        while True:
            seen = changes.current()
            row = self._views.row(self.workflow_id)
            if self._finished(row, deadline, timeout):
                return self._views.outcome(row)
            changes.wait(seen, rereads.pause(deadline))

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like :meth:`result`, without blocking the event loop."""
        timeout = _inputs.limit(timeout, "timeout", "result_async")
        deadline = None if timeout is None else time.monotonic() + timeout
        changes = self._views.runtime.store.changes
        rereads = _Rereads()
        while True:
            seen = await asyncio.to_thread(changes.current)
            row = await asyncio.to_thread(self._views.row, self.workflow_id)
            if self._finished(row, deadline, timeout):
                return self._views.outcome(row)
            await changes.wait_async(seen, rereads.pause(deadline))

    def _finished(self, row: RunRow, deadline: float | None, timeout: float | None) -> bool:
        if row.status in TERMINAL:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run {self.workflow_id!r} is still {row.status} after {timeout}s")
        return False

    def cancel(self) -> None:
        """Cancel the run: at once if it waits, else at its next step boundary."""
        self._cancel(self.workflow_id)


class _Rereads:
    """How long a waiting caller trusts the store's change signal (``Store.changes``: a run
    this process settled, SQLite's ``data_version``, PostgreSQL's notifications) before it
    reads the run anyway: intervals doubling from 10 ms to half a second, so that a change
    no signal covers is still seen soon while a long wait stays cheap."""

    FIRST = 0.01
    LONGEST = 0.5

    def __init__(self) -> None:
        self.every = self.FIRST

    def pause(self, deadline: float | None) -> float:
        """The next wait, never past ``deadline``."""
        pause, self.every = self.every, min(self.every * 2, self.LONGEST)
        if deadline is None:
            return pause
        return min(pause, max(0.0, deadline - time.monotonic()))
