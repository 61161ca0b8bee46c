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

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable

__all__ = ["BulkCheckpoints", "CommitCheckpoints"]

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

    def active(self) -> bool:
        """Whether bulk writes are under way (this thread checkpoints meanwhile)."""
        return self._users > 0

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


_COMMIT_PAGES = 800  # the log a commit leader lets grow before it copies it (autocheckpoint 1000)
_FIRST_DUE = 16  # writes before the first copy, which measures the pages a write adds
_MOST_DUE = 4096
_OPEN_WAIT_S = 0.1


class CommitCheckpoints:
    """Copies of the write-ahead log made by the write pipeline's commit leader after its
    commit, on a connection of its own (``PASSIVE``: it never blocks a writer).

    Left to the store's connection, the copy is made inside the commit that takes the log past
    1,000 pages, while that connection, and every write queued for the next commit, waits for
    it. Made here, by the thread that led the commit once its batch's callers are woken, it
    overlaps the next commits; only that thread's own run waits for it, as a lone run's commit
    waited for it before (no thread of its own: on 2 cores, one made a lone run slower). A
    commit an async caller led on its event loop (``GroupCommit``) has the copy made by a
    thread of its own, so the loop does not wait for it. The leader copies the log every
    ``_COMMIT_PAGES`` or so, which it estimates from the pages the writes before added, so the
    connection's own autocheckpoint (1,000 pages) is left to the writes outside the pipeline,
    and to a log that readers kept from starting over."""

    def __init__(self, path: str, synchronous: str, paused: Callable[[], bool]) -> None:
        self._path = path
        self._synchronous = synchronous
        self._paused = paused  # bulk writes: their own thread checkpoints (``BulkCheckpoints``)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._writes = 0  # committed through the pipeline since the last copy (approximately)
        self._due = _FIRST_DUE
        self._frames = 0  # the log's length in pages at the last copy
        self._whole = True  # whether that copy took it whole

    def committed(self, writes: int) -> None:
        """A commit of ``writes`` writes ended: copy the log if it is due (and no other thread
        is copying it); from an event loop, in a thread of its own."""
        self._writes += writes
        if self._writes < self._due or not self._lock.acquire(blocking=False):
            return
        if _on_a_loop():
            copier = threading.Thread(target=self._copy_held, name="stalwart-copy", daemon=True)
            copier.start()
            return
        self._copy_held()

    def _copy_held(self) -> None:
        """Copy the log; the lock is held, and released here."""
        try:
            if not self._closed and not self._paused():
                self._copy()
        except sqlite3.Error as exc:  # the store's connection checkpoints at commit then
            log.debug("checkpointing %s after a commit failed: %s", self._path, exc)
            self._due = _MOST_DUE
        finally:
            self._lock.release()

    def _copy(self) -> None:
        written, self._writes = self._writes, 0
        conn = self._conn
        if conn is None:
            conn = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=_OPEN_WAIT_S
            )
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            self._conn = conn
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        # a log the last copy took whole started over at its first page with the next write
        # (unless a reader held it), else it grew from where it was
        grown = frames if self._whole or frames < self._frames else frames - self._frames
        self._frames, self._whole = frames, not busy and copied == frames
        per_write = max(grown, 1) / max(written, 1)
        self._due = min(max(int(_COMMIT_PAGES / per_write), 1), _MOST_DUE)

    def close(self) -> None:
        """Close the connection (a copy under way finishes first)."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _on_a_loop() -> bool:
    """Whether the caller runs on an event loop (its thread must not wait on the disk)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
