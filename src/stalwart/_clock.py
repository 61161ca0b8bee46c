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
    """A database server's clock, read on this machine: the one clock of a shared store.

    A fleet compares times written by different machines (lease expiries, timers, rate
    windows); reading them all by the server's clock keeps a machine whose clock drifts or
    jumps from taking over live leases or waking timers early. The server's time is measured
    at start and every ``refresh_every`` seconds (one query; half its round trip is the error
    bound) and carried forward between measurements by this machine's monotonic clock, so a
    step of this machine's wall clock (an NTP step, a hand-set date) changes nothing: only the
    monotonic clock's rate error (parts per million) adds up until the next measurement. A
    failed measurement keeps the last one; with none at all, this machine's clock is used.
    """

    def __init__(
        self,
        measure: Callable[[], float | None],
        *,
        refresh_every: float = 60.0,
        first: float | None = None,
    ) -> None:
        self._measure = measure
        self._refresh_every = refresh_every
        self._lock = threading.Lock()
        self.offset = 0.0  # the server's clock minus this machine's, when last measured
        self._base = time.time() - time.monotonic()  # server time = monotonic + base
        self._measured_at = time.monotonic()
        self._apply(measure() if first is None else first)

    def _apply(self, offset: float | None) -> None:
        if offset is not None:
            wall, mono = time.time(), time.monotonic()
            self.offset = offset
            self._base = wall + offset - mono

    def time(self) -> float:
        """Seconds since the epoch, by the server's clock."""
        now = time.monotonic()
        if now - self._measured_at > self._refresh_every and self._lock.acquire(blocking=False):
            try:
                self._measured_at = now
                self._apply(self._measure())
            finally:
                self._lock.release()
            now = time.monotonic()
        return now + self._base
