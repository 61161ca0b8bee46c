"""SQLite's write-ahead log during bulk writes (a snapshot's chunks).

A connection copies the log into the database (a checkpoint) at the commit that takes the log
past 1,000 pages: under a stream of big transactions, the committing writer copies each one
again before it can write the next. While bulk writes go on, the store's connection stops
checkpointing at commit, and a thread with a connection of its own checkpoints meanwhile
(``PASSIVE``: it never blocks a writer), so the copy overlaps the next writes; a bulk writer
waits while more than ``_LAG_PAGES`` are left to copy (a commit of another connection would
copy them itself), and leaves the write lock free after each transaction for half as long as
it held it (other writers, claims among them, get their turn within a few of their busy
handler's polls). The log can only start over once it is copied whole and no reader uses it:
every ``DRAIN_BYTES`` written in bulk, the bulk writer waits for a ``RESTART`` checkpoint (it
holds other writers back while it copies the little the passive ones left, and waits for
readers to finish), after which the next transaction starts the log at its beginning. The log
stays under about ``DRAIN_BYTES`` plus a few transactions; when bulk writes end it is
truncated.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable

__all__ = ["BulkCheckpoints"]

DRAIN_BYTES = 64 * 1024 * 1024
_DRAIN_WAIT_S = 5.0  # past this (a long reader holds the log), a bulk writer goes on anyway
_LAG_WAIT_S = 1.0
_IDLE_S = 0.02
_LAG_PAGES = 1024  # the log uncopied before a bulk writer waits (4 MiB of 4 KiB pages)
_GAP_MIN_S = 0.002
_GAP_MAX_S = 0.05
_GAP_SHARE = 0.5  # the lock left free for half the time it was held (bench/snapshots.py)
_RESTART_WAIT_S = 0.02  # a RESTART holds writers back while it waits for readers
_CAUGHT_UP_PAGES = 256  # what a RESTART checkpoint may still copy with writers held back
_AUTOCHECKPOINT = 1000  # SQLite's default, what the store's connection runs with otherwise

log = logging.getLogger("stalwart")


class BulkCheckpoints:
    """Checkpoints of one SQLite file while its store writes in bulk (nested uses count)."""

    def __init__(self, path: str, autocheckpoint: Callable[[int], None]) -> None:
        self._path = path
        self._autocheckpoint = autocheckpoint
        self._cond = threading.Condition()
        self._users = 0
        self._written = 0
        self._asked = 0  # drains asked for
        self._drained = 0  # the last drain a complete checkpoint answered
        self._thread: threading.Thread | None = None
        self._stop = False
        self._lag = 0  # pages of the log the last checkpoint left uncopied

    def enter(self) -> None:
        with self._cond:
            self._users += 1
            if self._users > 1:
                return
            self._stop = False
            self._thread = threading.Thread(
                target=self._run, name="stalwart-checkpoints", daemon=True
            )
            self._thread.start()
        self._autocheckpoint(0)

    def leave(self) -> None:
        with self._cond:
            self._users -= 1
            if self._users:
                return
            self._lag = 0
            self._stop = True
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        self._autocheckpoint(_AUTOCHECKPOINT)
        if thread is not None:
            thread.join()

    def wrote(self, size: int, held: float) -> None:
        """``size`` bytes were committed in bulk by a transaction that held the write lock
        ``held`` seconds; past ``DRAIN_BYTES``, wait for a drain."""
        # SQLite's lock goes to whoever asks first, and a writer of another connection asks
        # again only when its busy handler wakes (every 25 to 100 ms once it waited a while):
        # leave the lock free for a while after each bulk transaction, so it finds it free.
        time.sleep(min(max(held, _GAP_MIN_S), _GAP_MAX_S) * _GAP_SHARE)
        with self._cond:
            if not self._users:
                return
            self._written += size
            self._cond.notify_all()
            # the log the checkpoints have yet to copy stays short: another writer's commit
            # may copy it all itself (its connection checkpoints at commit)
            self._cond.wait_for(lambda: self._lag < _LAG_PAGES or self._stop, _LAG_WAIT_S)
            if self._written < DRAIN_BYTES:
                return
            self._written = 0
            self._asked += 1
            asked = self._asked
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._drained >= asked or self._stop, _DRAIN_WAIT_S)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, timeout=_RESTART_WAIT_S)
        except sqlite3.Error as exc:  # the store's own connection checkpoints then
            log.warning("cannot open a connection to checkpoint %s: %s", self._path, exc)
            return
        state: tuple[int, int] | None = None  # the last checkpoint's (frames, copied)
        try:
            while (state := self._round(conn, state)) is not None:
                pass
        except sqlite3.Error as exc:
            log.warning("checkpointing %s failed: %s", self._path, exc)
        finally:
            with self._cond:
                self._drained = self._asked  # nobody waits for a thread that is gone
                self._cond.notify_all()
            with contextlib.suppress(sqlite3.Error):  # busy: the next checkpoint copies it
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # leave it empty
            conn.close()

    def _round(
        self, conn: sqlite3.Connection, before: tuple[int, int] | None
    ) -> tuple[int, int] | None:
        """One checkpoint: passive, or a RESTART when a drain is asked for and the passive
        ones caught up; then a pause when there is nothing to do. ``None``: stopped."""
        with self._cond:
            if self._stop:
                return None
            asked = self._asked
            caught_up = before is not None and before[0] - before[1] < _CAUGHT_UP_PAGES
            restart = asked > self._drained and caught_up
        pragma = f"PRAGMA wal_checkpoint({'RESTART' if restart else 'PASSIVE'})"
        busy, frames, copied = conn.execute(pragma).fetchall()[0]
        with self._cond:
            self._lag = max(frames - copied, 0)
            if frames == copied and not busy and (restart or asked == self._drained):
                self._drained = max(self._drained, asked)
                self._cond.notify_all()
            stuck = before == (frames, copied)  # a reader holds the rest back
            idle = self._asked == asked == self._drained
            gave_up = restart and busy  # readers held it: the other writers' turn first
            if (((frames == copied or stuck) and idle) or gave_up) and not self._stop:
                self._cond.wait(_IDLE_S)
        return frames, copied
