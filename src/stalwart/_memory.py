"""Giving a worker's memory back once a burst of work is over.

Running runs allocates (their journals, frames, rows), and after they suspend or end the
allocator keeps the freed memory for reuse: a worker that ran 10,000 runs into their waits
would hold their high-water mark for as long as it lives. Once the worker has had nothing
running for ``QUIET_S``, :class:`Trimmer` has the store free its caches (SQLite's page cache,
which it reads again as needed), collects cyclic garbage and asks the C allocator to return
its free pages (glibc's ``malloc_trim``; elsewhere that step is skipped).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

__all__ = ["Trimmer"]

log = logging.getLogger("stalwart")

QUIET_S = 1.0


def _malloc_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to ask
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class Trimmer:
    """Trims once per burst: after runs ran, when none has run for ``QUIET_S`` seconds."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release
        self._trim = _malloc_trim()
        self._dirty = False
        self._quiet_since: float | None = None

    def note(self, running: int, now: float) -> None:
        """Called on each turn of the worker's loop with how many runs it has under way."""
        if running:
            self._dirty, self._quiet_since = True, None
        elif self._dirty:
            if self._quiet_since is None:
                self._quiet_since = now
            elif now - self._quiet_since >= QUIET_S:
                self._dirty = False
                try:
                    self._release()
                except Exception:  # a cache left full costs memory, not correctness
                    log.debug("releasing the store's cached memory failed", exc_info=True)
                gc.collect()
                if self._trim is not None:
                    self._trim()
