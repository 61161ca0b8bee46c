"""Private control-flow signals. They derive from ``BaseException`` so that ``except
Exception:`` in workflow or step code cannot swallow them."""

from __future__ import annotations

__all__ = ["Abort", "EngineSignal", "LeaseLost"]


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
