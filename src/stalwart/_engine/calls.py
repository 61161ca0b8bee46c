"""The threads inside ``app.run`` now, so that ``app.close`` can let them give their runs back
(their loop closed, or they waited) before it closes the store under them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Calls"]


class Calls:
    """The threads in a call of ``Driver.run``."""

    def __init__(self) -> None:
        self._threads: set[int] = set()
        self._changed = threading.Condition()

    @contextmanager
    def entered(self) -> Iterator[None]:
        """While this thread is in a call."""
        me = threading.get_ident()
        with self._changed:
            self._threads.add(me)
        try:
            yield
        finally:
            with self._changed:
                self._threads.discard(me)
                self._changed.notify_all()

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the calls of other threads to return."""
        me = threading.get_ident()
        with self._changed:
            self._changed.wait_for(lambda: not self._threads - {me}, timeout)
