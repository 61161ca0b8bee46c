"""The SQLite backend (``sqlite:///path``) and the in-process ``memory://`` backend.

One connection per store, guarded by a lock, in autocommit mode: single-statement verbs are
their own transaction, multi-statement verbs run inside ``BEGIN IMMEDIATE`` so that a writer
never has to upgrade a read lock (the case where SQLite's busy handler cannot help). Busy waits
are absorbed by ``busy_timeout`` and, past it, by a retry loop; they never reach the caller.
"""

from __future__ import annotations

import functools
import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from .._errors import StoreError, UsageError, mask_url
from .base import READ_ONLY_DECLARATIONS, Entry, MissingStore
from .changes import Changes
from .checkpoints import BulkCheckpoints, CommitCheckpoints
from .disk_full import DiskFull, is_disk_full
from .group_commit import NO_WAIT, WouldWait
from .queries import load_queries
from .sql import SQLStore
from .sql._base import ENTRY_COLUMNS, _inline
from .sql.pipeline import Write

__all__ = ["SQLiteStore"]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5_000
_PAYLOAD_BATCH = 500  # digests a read of stored pieces binds (SQLite allows 32,766 variables)
BUSY_GIVE_UP_S = 300.0
# How long a commit led on an event loop waits for another thread of this process to finish
# with the connection (the worker's poll of ``data_version``, a claim's read) before it hands
# its writes to a thread: long enough for such a read, short enough not to hold up the loop.
IN_PLACE_WAIT_S = 0.002

_Q = load_queries("sqlite")
_VACUUM_PAGES = 64  # what one step of incremental vacuum frees at most: a step moves pages


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _folder_of(url: str, path: Path) -> None:
    """Make sure the folder of the database file exists: only the default store's own folder,
    ``.stalwart``, is created (in a folder that exists); any other missing folder is most
    likely a typo, refused rather than filled with an empty store."""
    folder = path.parent
    if folder.name == ".stalwart" and folder.parent.is_dir():
        folder.mkdir(exist_ok=True)
    elif folder.exists() and not folder.is_dir():
        raise UsageError(f"{mask_url(url)}: {str(folder)!r} is not a folder; fix the path")
    elif not folder.exists():
        raise UsageError(
            f"{mask_url(url)}: the folder {str(folder)!r} does not exist; create it first "
            "or fix the path (only the default store's own .stalwart/ folder is created)"
        )


# The rows one multi-row append takes (``_append_together``): a batch of 140 is 4 x 32 + 8 +
# 2 + 2; each size is one statement the connection prepares once, and 32 rows' parameters
# stay under 999, the most SQLite before 3.32 binds.
_APPEND_ROWS = (32, 8, 2, 1)
_APPEND_WIDTH = len(ENTRY_COLUMNS) + 1  # and the lease's owner


@functools.cache
def _append_rows(size: int) -> str:
    """``append_entry_if_owner`` of ``size`` entries in one statement."""
    columns = ", ".join(ENTRY_COLUMNS)
    picked = ", ".join(f"column{i}" for i in range(1, len(ENTRY_COLUMNS) + 1))
    row = "(" + ", ".join("?" * _APPEND_WIDTH) + ")"
    return (
        f"INSERT INTO journal ({columns}) SELECT {picked} FROM (VALUES {', '.join([row] * size)})"
        f" WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = column1"
        f" AND lease_owner = column{_APPEND_WIDTH})"
    )


class SQLiteStore(SQLStore):
    """A store in one SQLite database file, or in memory for ``memory://``."""

    _collect_batch = 50  # one writer for every claim: short collector transactions
    _commits_in_place = True  # a commit is local: a lone async run's step commits it itself
    _appends_together = True  # a batch's step outcomes: a few statements, not one each

    def __init__(self, url: str, path: str | None, *, durability: str) -> None:
        self.url = url
        self._path = path
        self.durable = path is not None
        self._q = _Q
        self._lock = threading.RLock()
        self._disk_full = DiskFull(url, path)
        try:
            if path is None:
                conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            else:
                if READ_ONLY_DECLARATIONS.get() and not Path(path).exists():
                    raise MissingStore(self._unmigrated(0), path=Path(path).absolute())
                _folder_of(url, Path(path))
                conn = sqlite3.connect(
                    path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                )
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                # before the first table: a new store's freed pages can go back to the file
                # system (docs/lifecycle.md, "Pruning"); a no-op on an existing one
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self._set_wal(conn)
                conn.execute(
                    "PRAGMA synchronous = " + ("FULL" if durability == "power" else "NORMAL")
                )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                f"cannot open the SQLite store {mask_url(url)}: {exc}; check that the folder is "
                "writable and the file is a SQLite database"
            ) from exc
        self._conn = conn
        self._busy_ms = BUSY_TIMEOUT_MS  # the connection's busy timeout now (``_take``)
        self._bulk = None if path is None else BulkCheckpoints(path, self._autocheckpoint)
        self._copies: CommitCheckpoints | None = None
        if path is not None:
            synchronous = "FULL" if durability == "power" else "NORMAL"
            self._copies = CommitCheckpoints(path, synchronous, self._in_bulk)
        self.changes = Changes(self.data_version)
        self.stream_changes = self.changes  # one file, one change counter
        self._migrate()
        self._open_pipeline(None if self._copies is None else self._copies.committed)

    def _named(self) -> str:
        """The store by its absolute path (a relative URL means nothing where it is read)."""
        if self._path is None:
            return self.url
        return f"sqlite:///{Path(self._path).absolute().as_posix()}"

    def _set_wal(self, conn: sqlite3.Connection) -> None:
        deadline = time.monotonic() + BUSY_GIVE_UP_S
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            raise StoreError(f"{mask_url(self.url)}: SQLite refused WAL mode (got {mode})")

    # -- plumbing -------------------------------------------------------------------------

    def _autocheckpoint(self, pages: int) -> None:
        self._retrying(lambda: self._conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}"))

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Big writes follow: the write-ahead log is copied by a thread of its own meanwhile
        (``checkpoints``), not by each commit."""
        if self._bulk is None:
            yield
            return
        self._bulk.enter()
        try:
            yield
        finally:
            self._bulk.leave()

    def _wrote_in_bulk(self, size: int, held: float) -> None:
        if self._bulk is not None:
            self._bulk.wrote(size, held)

    def _in_bulk(self) -> bool:
        return self._bulk is not None and self._bulk.active()

    def close(self) -> None:
        """Close the connection (a commit under way ends first), then let the pipeline's
        threads end."""
        if self._copies is not None:
            self._copies.close()
        with self._lock:
            self._conn.close()
        self._pipeline.close()

    def _retrying(self, work: Callable[[], T]) -> T:
        began = time.monotonic()
        deadline = began + BUSY_GIVE_UP_S
        delay, full_delay = 0.001, 0.05
        while True:
            try:
                self._take()
                try:
                    result = work()
                finally:
                    self._lock.release()
                if full_delay > 0.05:  # this write waited for space: there is room again
                    self._disk_full.over()
                return result
            except sqlite3.OperationalError as exc:
                if NO_WAIT.get() and (_is_busy(exc) or is_disk_full(exc)):
                    raise WouldWait(str(exc)) from exc
                if is_disk_full(exc):
                    full_delay = self._disk_full.wait(exc, began, full_delay)
                    continue
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise StoreError(f"{mask_url(self.url)}: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{mask_url(self.url)}: {exc}") from exc
            time.sleep(random.uniform(0, delay))
            delay = min(delay * 2, 0.1)

    def _take(self) -> None:
        """Take the connection (release ``_lock`` after), with the busy timeout this caller
        needs. A commit led in place on an event loop (``NO_WAIT``) waits for no other process,
        nor for another thread of this process past a quick read (``IN_PLACE_WAIT_S``): it
        raises ``WouldWait`` (its writes go to a thread) rather than hold up the loop."""
        no_wait = NO_WAIT.get()
        if not (self._lock.acquire(timeout=IN_PLACE_WAIT_S) if no_wait else self._lock.acquire()):
            raise WouldWait("the store's connection is in use by another thread")
        wait = 0 if no_wait else BUSY_TIMEOUT_MS
        if wait != self._busy_ms:
            try:
                self._conn.execute(f"PRAGMA busy_timeout = {wait}")
            except BaseException:
                self._lock.release()
                raise
            self._busy_ms = wait

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:  # SQLite may have rolled back on its own (a full disk)
                    if conn.in_transaction:
                        raise
            raise

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            with self._transaction() as conn:
                return work(conn)

        return self._retrying(attempt)

    def _migrate(self) -> None:
        try:
            self._migrate_with(self._write, "sqlite")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot use the store {mask_url(self.url)}: {exc}") from exc

    @staticmethod
    def _apply_script(conn: sqlite3.Connection, sql: str) -> None:
        code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
        statement = ""
        for part in code.split(";"):
            statement += part + ";"
            if sqlite3.complete_statement(statement):  # a trigger's body holds several
                if statement.strip(" \n;"):
                    conn.execute(statement)
                statement = ""

    def _reading(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """A long read on a read-only connection of its own, in one snapshot: this
        process's other threads keep the store's connection meanwhile."""
        if self._path is None:
            return self._run(work)
        path = Path(self._path).absolute().as_posix()
        began, delay = time.monotonic(), 0.05
        while True:
            try:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
            except sqlite3.Error as exc:
                raise StoreError(f"{mask_url(self.url)}: {exc}") from exc
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute("BEGIN")
                return work(conn)
            except sqlite3.OperationalError as exc:
                # a reader may have to grow the write-ahead log's index: a full disk stops it
                if not is_disk_full(exc):
                    raise StoreError(f"{mask_url(self.url)}: {exc}") from exc
                delay = self._disk_full.wait(exc, began, delay)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{mask_url(self.url)}: {exc}") from exc
            finally:
                conn.close()

    def _reclaim(self) -> bool:
        """Give up to ``_VACUUM_PAGES`` free pages back to the file system, where the store
        was created with incremental vacuum (elsewhere SQLite reuses them for new rows);
        whether free pages are left."""

        def vacuum(conn: sqlite3.Connection) -> bool:
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                return False
            conn.execute(f"PRAGMA incremental_vacuum({_VACUUM_PAGES})").fetchall()
            return bool(conn.execute("PRAGMA freelist_count").fetchone()[0] > 0)

        return self._write(vacuum)

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        # Rows are fetched under the lock: a cursor steps its statement on every fetch, and a
        # statement stepped while another thread uses the connection corrupts both.
        return self._retrying(lambda: work(self._conn))

    def _list(self, values: list[str]) -> str:
        return json.dumps(values)

    def _fetch_found(self, conn: sqlite3.Connection, digests: list[bytes]) -> dict[bytes, bytes]:
        """The stored pieces among ``digests``, ``_PAYLOAD_BATCH`` a read."""
        unique = list(dict.fromkeys(digests))
        found: dict[bytes, bytes] = {}
        for start in range(0, len(unique), _PAYLOAD_BATCH):
            part = unique[start : start + _PAYLOAD_BATCH]
            query = self._q["get_payloads"].replace(":digests", ",".join("?" * len(part)))
            found.update((bytes(key), bytes(data)) for key, data in conn.execute(query, part))
        return found

    def clock_offset(self) -> float:
        """0.0: the store is on this machine and reads its clock."""
        return 0.0

    def release_memory(self) -> None:
        """Free the connection's page cache (SQLite reads the pages again when it needs
        them): a worker calls it when a burst of runs is over."""
        self._retrying(lambda: self._conn.execute("PRAGMA shrink_memory").fetchall())

    def data_version(self) -> int:
        """A number that changes whenever another connection commits."""
        return int(self._retrying(lambda: self._conn.execute("PRAGMA data_version").fetchone()[0]))

    def _append_together(self, conn: sqlite3.Connection, writes: list[Write]) -> bool:
        """A batch's fenced appends as multi-row INSERTs, ``_APPEND_ROWS`` rows at most
        each (a few statement shapes, so the connection's statement cache keeps them); a lost
        lease among them undoes them all, to be done one by one."""
        values: list[Any] = []
        for write in writes:
            entry, owner = write.fenced  # type: ignore[misc]
            params = self._entry_params(conn, write.workflow_id, entry, owner)
            params["call_id"] = write.call_id  # (``_one`` would have set it for ``work``)
            values += params.values()
        conn.execute("SAVEPOINT appends")
        written, at, left = 0, 0, len(writes)
        for size in _APPEND_ROWS:
            while left >= size:
                width = size * _APPEND_WIDTH
                written += conn.execute(_append_rows(size), values[at : at + width]).rowcount
                at, left = at + width, left - size
        if written != len(writes):
            conn.execute("ROLLBACK TO appends")
        conn.execute("RELEASE appends")
        return written == len(writes)

    def _append_alone(self, workflow_id: str, entry: Entry, *, owner: str | None) -> bool:
        """Append a journal entry in a transaction of its own, fenced by the lease when
        ``owner`` is given."""
        if _inline(entry):
            # An ordinary step's hot path: one autocommitted statement. When another process
            # wrote first, SQLite refuses it at once (its busy handler cannot wait for a
            # statement that began as a read), and the write is redone as BEGIN IMMEDIATE.
            query = self._q["append_entry" if owner is None else "append_entry_if_owner"]
            params = self._entry_params(self._conn, workflow_id, entry, owner)
            try:
                self._take()
                try:
                    return bool(self._conn.execute(query, params).rowcount == 1)
                finally:
                    self._lock.release()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) and not is_disk_full(exc):  # the slow way waits for both
                    raise StoreError(f"{mask_url(self.url)}: {exc}") from exc
        return super()._append_alone(workflow_id, entry, owner=owner)
