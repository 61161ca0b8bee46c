"""How the threads of one process learn that a store changed, without a thread per waiter.

A :class:`Changes` is a counter that moves when the store may have changed, and a condition
the threads waiting on it block on. There is one per store object, whatever the number of
waiters. It is fed in one of two ways:

- pushed: PostgreSQL's listener (one connection and thread per store) calls :meth:`push` on
  each ``NOTIFY`` it receives, and on each reconnect (what happened while it was away is
  unknown). Waiters wake on delivery; while the listener is down they poll instead.
- polled: on SQLite, one of the waiting threads at a time reads the file's
  ``PRAGMA data_version`` (a few microseconds) every ``POLL_SECONDS`` on behalf of all of
  them, and wakes them when it moves; polling slows down when nothing has changed for a
  while, so a long wait stays cheap.

Commits of this process's own connection are not seen by ``data_version``: the engine calls
:meth:`push` when a run of this process settles (``Runtime.note_settled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Changes"]

POLL_SECONDS = 0.001  # a waiter polls this often right after it starts waiting...
SLOWEST_POLL_SECONDS = 0.005  # ...slowing down to this when nothing changes
SLOW_DOWN_AFTER_S = 2.0  # polls in a wait's first seconds without a change stay fast
DOWN_POLL_SECONDS = 0.05  # a pushed store whose listener is down: waiters look this often
# How often an idle worker's loop looks at the store between nudges: a polled store needs a
# short turn to wake a run soon after another process's commit (a data_version read is a few
# microseconds); a pushed one wakes the loop itself, which then only looks for signals.
POLLED_IDLE_SECONDS = 0.0025
PUSHED_IDLE_SECONDS = 0.01


class Changes:
    """A change counter of one store and the condition its waiters block on.

    ``poll``: reads the store's own change number (SQLite's ``data_version``); ``None`` for a
    store whose changes are pushed (:meth:`push`) by a listener, which ``start`` starts on
    first use.
    """

    def __init__(
        self, poll: Callable[[], int] | None = None, start: Callable[[], None] | None = None
    ) -> None:
        self._poll = poll
        self._start = start
        self._cond = threading.Condition()
        self._version = 0
        self._raw: int | None = None  # the last polled number
        self._polling = False  # one waiter at a time polls for all
        self._quiet_since = time.monotonic()
        self._callbacks: list[Callable[[], None]] = []
        self.live = poll is not None  # pushed: whether the listener is connected

    @property
    def idle_seconds(self) -> float:
        """How long an idle worker's loop may wait between two looks at the store."""
        return PUSHED_IDLE_SECONDS if self._poll is None else POLLED_IDLE_SECONDS

    @property
    def version(self) -> int:
        """The counter as it is (no poll)."""
        return self._version

    def current(self) -> int:
        """The counter after a look at the store (a poll, where the store is polled): read it
        before reading what you wait on, then :meth:`wait` for it to move."""
        if self._poll is not None:
            self._look()
        elif self._start is not None:
            self._started()
        return self._version

    def _started(self) -> None:
        with self._cond:  # two first waiters at once start one listener
            start, self._start = self._start, None
        if start is not None:
            start()

    def push(self) -> None:
        """The store may have changed: wake every waiter and call every subscriber."""
        with self._cond:
            self._version += 1
            self._quiet_since = time.monotonic()
            self._cond.notify_all()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (quick, never blocking) on every push: a worker's nudge."""
        self._started()
        with self._cond:
            self._callbacks.append(callback)

    def unsubscribe(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback``."""
        with self._cond:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    @contextmanager
    def subscribed(self, callback: Callable[[], None]) -> Iterator[None]:
        """:meth:`subscribe` for the duration of a ``with`` block."""
        self.subscribe(callback)
        try:
            yield
        finally:
            self.unsubscribe(callback)

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the counter is no longer ``seen`` or ``timeout`` seconds passed;
        returns the counter."""
        began = time.monotonic()
        deadline = began + timeout
        while True:
            with self._cond:
                remaining = deadline - time.monotonic()
                if self._version != seen or remaining <= 0:
                    return self._version
                if self._poll is None:
                    pause = remaining if self.live else min(remaining, DOWN_POLL_SECONDS)
                    self._cond.wait(pause)
                    if not self.live:
                        return self._version  # no listener: the caller looks for itself
                    continue
                if self._polling:
                    self._cond.wait(remaining)
                    continue
                self._polling = True
            try:
                self._poll_until(seen, began, deadline)
            finally:
                with self._cond:
                    self._polling = False
                    self._cond.notify_all()  # another waiter may take over the polling

    async def wait_async(self, seen: int, timeout: float) -> int:
        """:meth:`wait` for a coroutine: the event loop is never blocked, and no thread is
        held while it waits (a polled store is looked at from a worker thread, briefly)."""
        loop = asyncio.get_running_loop()
        moved = asyncio.Event()

        def nudge() -> None:
            # (a waiter whose loop closed under it: nobody awaits it, and the pusher, the
            # engine's own bookkeeping, must not fail for it)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(moved.set)

        self.subscribe(nudge)
        try:
            began = time.monotonic()
            deadline = began + timeout
            while self._version == seen:
                now = time.monotonic()
                if now >= deadline:
                    break
                if self._poll is None:
                    step = deadline - now if self.live else DOWN_POLL_SECONDS
                else:
                    quiet = now - max(began, self._quiet_since)
                    step = POLL_SECONDS if quiet < SLOW_DOWN_AFTER_S else SLOWEST_POLL_SECONDS
                try:
                    await asyncio.wait_for(moved.wait(), min(step, deadline - now))
                except TimeoutError:
                    if self._poll is not None:
                        await asyncio.to_thread(self._look)
                    elif not self.live:
                        break
            return self._version
        finally:
            self.unsubscribe(nudge)

    def _poll_until(self, seen: int, began: float, deadline: float) -> None:
        while self._version == seen:
            self._look()
            now = time.monotonic()
            if self._version != seen or now >= deadline:
                return
            quiet = now - max(began, self._quiet_since)
            pause = POLL_SECONDS if quiet < SLOW_DOWN_AFTER_S else SLOWEST_POLL_SECONDS
            with self._cond:
                if self._version == seen:
                    self._cond.wait(min(pause, deadline - now))

    def _look(self) -> None:
        assert self._poll is not None
        raw = self._poll()
        with self._cond:
            if raw == self._raw:
                return
            first = self._raw is None
            self._raw = raw
        if not first:
            self.push()
