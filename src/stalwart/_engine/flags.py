"""``Flag``: what an invocation's stop signals need of ``threading.Event``, and no more."""

from __future__ import annotations

__all__ = ["Flag"]


class Flag:
    """A flag that other threads set (the lease keeper, a cancel, a shutdown) and the run's
    thread reads at each boundary, never waits on: an ``Event`` without the lock and the
    condition each ``Event`` builds (an invocation has three, built once a run). Setting
    and reading a bool is atomic in Python."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Raise the flag."""
        self._set = True

    def clear(self) -> None:
        """Lower the flag."""
        self._set = False

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        return self._set
