"""Clocks: the engine reads time and sleeps only through one of these."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "ServerClock", "SystemClock"]


class Clock(Protocol):
    """Wall-clock time in epoch seconds, and a way to wait."""

    def time(self) -> float:
        """Seconds since the epoch."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        if seconds > 0:
            time.sleep(seconds)


class ServerClock(SystemClock):
    """This machine's clock, corrected to a database server's.

    A fleet compares times written by different machines (lease expiries, timers, rate
    windows); reading them all against the server's clock keeps a machine whose clock drifts
    from taking over live leases or waking timers early. The offset is measured at start and
    every ``refresh_every`` seconds (one query; half its round trip is the error bound); a
    failed measurement keeps the last offset.
    """

    def __init__(self, measure: Callable[[], float | None], *, refresh_every: float = 60.0) -> None:
        self._measure = measure
        self._refresh_every = refresh_every
        self._lock = threading.Lock()
        self.offset = measure() or 0.0
        self._measured_at = time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch, by the server's clock."""
        if time.monotonic() - self._measured_at > self._refresh_every and self._lock.acquire(
            blocking=False
        ):
            try:
                self._measured_at = time.monotonic()
                measured = self._measure()
                if measured is not None:
                    self.offset = measured
            finally:
                self._lock.release()
        return time.time() + self.offset
