"""Private control-flow signals. They derive from ``BaseException`` so that ``except
Exception:`` in workflow or step code cannot swallow them."""

from __future__ import annotations

__all__ = [
    "Abort",
    "Cancel",
    "EngineSignal",
    "InDoubt",
    "LeaseLost",
    "LoopClosed",
    "Release",
    "StoreFailed",
    "Suspend",
]


class EngineSignal(BaseException):
    """Base of the engine's internal signals."""


class Abort(EngineSignal):
    """Stop the invocation: ``error`` is what the caller sees (divergence, corrupt record)."""

    def __init__(self, error: Exception, *, attention: bool):
        super().__init__(str(error))
        self.error = error
        self.attention = attention


class LeaseLost(EngineSignal):
    """Another process holds this run now; stop without writing anything more."""


class Suspend(EngineSignal):
    """Unwind the workflow: it waits until ``wake_at`` or until ``waiting_for`` arrives."""

    def __init__(self, *, wake_at: float | None, waiting_for: str | None):
        super().__init__(waiting_for or "timer")
        self.wake_at = wake_at
        self.waiting_for = waiting_for


class Cancel(EngineSignal):
    """Stop the run at this boundary: it was cancelled or its deadline passed."""


class StoreFailed(EngineSignal):
    """The store failed while the engine journaled: stop without deciding the run's fate."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class InDoubt(EngineSignal):
    """An irreversible step may have taken effect and cannot be checked: ask an operator."""

    def __init__(self, reason: str, *, seq: int):
        super().__init__(reason)
        self.reason = reason
        self.seq = seq


class LoopClosed(EngineSignal):
    """The event loop the run's async code runs on closed, or cancelled the run's task as it
    closes (an app closing, or the end of ``asyncio.run`` around ``app.run_async``): give the
    run back; how it ends is not this process's to say."""


class Release(EngineSignal):
    """The worker is shutting down: give the run back at this boundary (not a recovery)."""
