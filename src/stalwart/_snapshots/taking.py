"""Taking a snapshot: the tree is walked, each file read as a stream and cut into chunks,
and the chunks compressed and written in bounded batches by other threads while the next
batch is read (see ``_Writer``). A chunk the
store already has is not compressed again; a file whose size and modification time equal
those of the run's previous snapshot of the same name is taken from it unread."""

from __future__ import annotations

import datetime as _dt
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from .._errors import InvalidOperation
from .._model import SnapshotRef
from .._store import Store
from .._store.snapshots import SnapshotFileRow, StoredChunk
from .chunking import chunks, compress, digest_of
from .tree import TreeEntry, walk

__all__ = ["take"]

_BATCH_BYTES = 6 * 1024 * 1024  # raw bytes a chunk batch (one transaction) carries at most
_IN_FLIGHT = 2  # batches compressing or waiting for the writer while the next one is read
_BATCH_USES = 512  # chunks a batch names at most (a tree of small files)
_FILE_ROWS = 500  # tree entries a transaction inserts
_PAGE = 1000


class _Stale(Exception):
    """A chunk of the previous snapshot is no longer stored: take this one in full."""


@dataclass
class _Batch:
    items: list[tuple[bytes, int, bytes | None]] = field(default_factory=list)
    raw: int = 0


class _Writer:
    """A pipeline of three stages: the caller reads and cuts files; two threads compress a
    batch's new chunks (zstd releases the GIL) while one thread writes the batch before it
    and the tree rows, in order. At most ``_IN_FLIGHT`` batches wait for the writer, so
    memory stays bounded whatever the size of the tree."""

    def __init__(self, store: Store, snapshot_id: str, now: Callable[[], float]) -> None:
        self.store, self.snapshot_id, self.now = store, snapshot_id, now
        self.stored_bytes = 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="stalwart-snapshot")
        self._squeeze = ThreadPoolExecutor(2, thread_name_prefix="stalwart-zstd")
        self._pending: list[Future[None]] = []

    def submit(self, work: Callable[[], None]) -> None:
        while len(self._pending) >= _IN_FLIGHT:
            self._pending.pop(0).result()
        self._pending.append(self._thread.submit(work))

    def wait(self) -> None:
        while self._pending:
            self._pending.pop(0).result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._thread.shutdown(wait=True, cancel_futures=True)
            self._squeeze.shutdown(wait=True, cancel_futures=True)

    def chunks(self, batch: _Batch) -> None:
        """Start compressing the batch's chunks that were read, and queue its write (a chunk
        the store has already is compressed all the same: asking the store first would wait
        for the writer, which holds SQLite's one connection). The batch keeps no raw bytes
        once they are handed to a compressor."""
        keyring = self.store.keyring
        sealing = {
            d: self._squeeze.submit(compress, raw, keyring, d)
            for d, _, raw in batch.items
            if raw is not None
        }
        plan = [(d, n) for d, n, _ in batch.items]
        batch.items.clear()
        self.submit(lambda: self._write(plan, sealing))

    def _write(self, plan: list[tuple[bytes, int]], sealing: dict[bytes, Future[bytes]]) -> None:
        sealed = {d: future.result() for d, future in sealing.items()}
        given = [StoredChunk(d, n, sealed.get(d)) for d, n in plan]
        wrote = self.store.put_chunks(self.snapshot_id, given, now=self.now())
        if wrote.missing:  # a chunk of the previous snapshot is gone: read every file
            raise _Stale
        self.stored_bytes += wrote.stored_bytes

    def rows(self, rows: Sequence[SnapshotFileRow]) -> None:
        self.store.put_snapshot_files(self.snapshot_id, rows)


class _Taking:
    """One snapshot being taken: its batch, its tree rows and its totals."""

    def __init__(self, writer: _Writer, known: dict[str, SnapshotFileRow]) -> None:
        self.writer, self.known = writer, known
        self.batch = _Batch()
        self.rows: list[SnapshotFileRow] = []
        self.seen: set[bytes] = set()
        self.files = self.bytes = 0

    def use(self, digest: bytes, size: int, raw: bytes | None) -> None:
        if digest in self.seen:
            return
        self.seen.add(digest)
        self.batch.items.append((digest, size, raw))
        self.batch.raw += size if raw is not None else 0
        if self.batch.raw >= _BATCH_BYTES or len(self.batch.items) >= _BATCH_USES:
            self.flush_chunks()

    def flush_chunks(self) -> None:
        if self.batch.items:
            batch, self.batch = self.batch, _Batch()
            self.writer.chunks(batch)

    def add(self, entry: TreeEntry) -> None:
        content: bytes | None = None
        size = entry.size
        if entry.kind == "file":
            try:
                content, size = self.read(entry)
            except FileNotFoundError:
                return  # removed since the folder was listed: not part of the snapshot
            self.files += 1
            self.bytes += size
        self.rows.append(
            SnapshotFileRow(
                entry.path, entry.kind, entry.mode, size, entry.mtime_ns, entry.target, content
            )
        )
        if len(self.rows) >= _FILE_ROWS:
            self.flush_rows()

    def flush_rows(self) -> None:
        if self.rows:
            self.flush_chunks()  # a row's chunks are written before it
            rows, self.rows = self.rows, []
            self.writer.submit(lambda: self.writer.rows(rows))

    def read(self, entry: TreeEntry) -> tuple[bytes, int]:
        """The file's chunk list and size: the previous snapshot's when its size and
        modification time are unchanged, else read now."""
        before = self.known.get(entry.path)
        if before is not None and before.size == entry.size and before.mtime_ns == entry.mtime_ns:
            listed = before.chunks or b""
            for start in range(0, len(listed), 32):
                self.use(listed[start : start + 32], 0, None)
            return listed, before.size
        digests = []
        size = 0
        with open(entry.full, "rb", buffering=0) as file:
            for piece in chunks(file):
                digest = digest_of(piece, self.writer.store.keyring)
                digests.append(digest)
                size += len(piece)
                self.use(digest, len(piece), piece)
        return b"".join(digests), size


def _known_files(store: Store, snapshot_id: str) -> dict[str, SnapshotFileRow]:
    known: dict[str, SnapshotFileRow] = {}
    after = ""
    while page := store.snapshot_files(snapshot_id, after=after, limit=_PAGE):
        known.update((row.path, row) for row in page if row.kind == "file")
        after = page[-1].path
    return known


def _entries(root: str, exclude: Sequence[str]) -> Iterator[TreeEntry]:
    if not os.path.isdir(root):
        raise ValueError(f"snapshot({root!r}): not a folder; pass the workspace's folder")
    return walk(root, exclude)


def take(
    store: Store,
    *,
    workflow_id: str,
    root: str,
    name: str,
    exclude: Sequence[str],
    now: Callable[[], float],
) -> SnapshotRef:
    """Snapshot the tree at ``root`` for run ``workflow_id``."""
    entries = _entries(root, exclude)
    previous = store.last_snapshot(workflow_id, name)
    known = {} if previous is None else _known_files(store, previous.id)
    try:
        return _take(store, workflow_id, name, entries, known=known, now=now)
    except _Stale:  # a chunk of the previous snapshot went: read every file
        return _take(store, workflow_id, name, _entries(root, exclude), known={}, now=now)


def _take(
    store: Store,
    workflow_id: str,
    name: str,
    entries: Iterator[TreeEntry],
    *,
    known: dict[str, SnapshotFileRow],
    now: Callable[[], float],
) -> SnapshotRef:
    snapshot_id = f"{uuid.uuid4().hex[:16]}@{workflow_id}"
    started = now()
    if not store.begin_snapshot(snapshot_id, workflow_id=workflow_id, name=name, now=started):
        raise InvalidOperation(f"snapshot: run {workflow_id!r} is not in the store")
    writer = _Writer(store, snapshot_id, now)
    taking = _Taking(writer, known)
    with store.bulk_writes():
        try:
            for entry in entries:
                taking.add(entry)
            taking.flush_rows()
            taking.flush_chunks()
        finally:
            writer.close()
    store.finish_snapshot(
        snapshot_id, files=taking.files, bytes=taking.bytes, stored_bytes=writer.stored_bytes
    )
    return SnapshotRef(
        id=snapshot_id,
        name=name,
        files=taking.files,
        bytes=taking.bytes,
        stored_bytes=writer.stored_bytes,
        created_at=_dt.datetime.fromtimestamp(started, _dt.UTC),
    )
