"""How the SQLite store meets a full disk: a write waits for space and is retried, like a
write to a PostgreSQL server that went away, instead of failing the run it was recording.

A step whose result cannot be written because the disk is full has done its work: failing the
write would throw that result away and count the attempt as interrupted (for an irreversible
step without ``verify``, an operator's problem). So the write is retried with a backoff for up
to :data:`DISK_FULL_GIVE_UP_S`; the full disk is logged once, in one line that says where to
free space, and again once there is room. Nothing is written half-way meanwhile: each try is
one transaction, rolled back when it fails.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

from .._errors import StoreError, mask_url

__all__ = ["DISK_FULL_GIVE_UP_S", "DiskFull", "is_disk_full"]

log = logging.getLogger("stalwart")

DISK_FULL_GIVE_UP_S = 300.0
_MAX_DELAY_S = 1.0


def is_disk_full(exc: sqlite3.Error) -> bool:
    """Whether SQLite failed because the disk (or the file system's quota) is full."""
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


class DiskFull:
    """One store's record of a full disk (shared by its threads, logged once)."""

    def __init__(self, url: str, path: str | None) -> None:
        self._url = url
        self._folder = str(Path(path).absolute().parent) if path else "."
        self._since: float | None = None
        self._lock = threading.Lock()

    def wait(self, exc: sqlite3.Error, began: float, delay: float) -> float:
        """A write begun at ``began`` found the disk full: log it (once), raise
        :class:`StoreError` once it has waited too long, else sleep ``delay`` and return the
        next delay."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = now
                log.warning(
                    "store %s: the disk is full (%s); free space in %s: writes wait and are "
                    "retried for up to %.0f s, nothing recorded is lost",
                    mask_url(self._url),
                    exc,
                    self._folder,
                    DISK_FULL_GIVE_UP_S,
                )
        if now - began > DISK_FULL_GIVE_UP_S:
            raise StoreError(
                f"{mask_url(self._url)}: the disk is full ({exc}) and stayed full for "
                f"{now - began:.0f} s; free space in {self._folder}"
            ) from exc
        time.sleep(delay)
        return min(delay * 2, _MAX_DELAY_S)

    def over(self) -> None:
        """A write went through: if the disk was full, say that it has room again."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            log.warning(
                "store %s: the disk has room again after %.1f s; writes go on",
                mask_url(self._url),
                time.monotonic() - self._since,
            )
            self._since = None
