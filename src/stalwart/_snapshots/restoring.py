"""Restoring a snapshot: the tree is built in a hidden folder beside the target and renamed
into place once every chunk of every file matched its digest, so a failure leaves nothing
under the target's name. Nothing is written outside it: an entry is created only in a folder
this restore made (never through a link), files are opened with ``O_EXCL | O_NOFOLLOW``,
links are created as links, and a path that would leave the tree is refused."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from .._errors import CorruptRecord
from .._store import Store
from .._store.snapshots import SnapshotFileRow, SnapshotRow
from .chunking import opened
from .tree import ROOT

__all__ = ["restore_tree"]

_PAGE = 500
_AHEAD = 6  # chunks read ahead of the one being written (each at most 4 MiB)
_KINDS = ("file", "dir", "link")


def _rows(store: Store, snapshot_id: str) -> Iterator[SnapshotFileRow]:
    after = ""
    while page := store.snapshot_files(snapshot_id, after=after, limit=_PAGE):
        yield from page
        after = page[-1].path


def _target(path: str) -> str:
    """``path`` checked: missing or an empty folder, in a folder that exists."""
    if os.path.lexists(path) and (
        os.path.islink(path) or not os.path.isdir(path) or os.listdir(path)
    ):
        raise ValueError(
            f"restore: {path!r} exists and is not an empty folder; pass a new path or "
            "empty it first"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"restore: the folder {parent!r} does not exist; create it first")
    return os.path.abspath(path)


class _File:
    """A file being written: its entry, its descriptor, and how much of it is still to come."""

    def __init__(self, row: SnapshotFileRow, fd: int, chunks: int) -> None:
        self.row, self.fd, self.left, self.written = row, fd, chunks, 0


class _Building:
    """The tree being built under ``staging``, in path order. A file is created when its
    entry comes; its chunks are read, decompressed and checked on two threads, up to
    ``_AHEAD`` chunks ahead of the one being written, across files."""

    def __init__(self, store: Store, snapshot: SnapshotRow, staging: str) -> None:
        self.store, self.snapshot, self.staging = store, snapshot, staging
        self.folders: set[str] = {""}  # folders this restore made (relative; "" the root)
        self.dated: list[tuple[str, int, int]] = []  # folders: (full, mode, mtime), in order
        self.root: SnapshotFileRow | None = None
        self.pending: deque[tuple[_File, Future[bytes]]] = deque()
        self.open: dict[int, _File] = {}
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="stalwart-restore")

    def corrupt(self, row: SnapshotFileRow, why: str) -> CorruptRecord:
        return CorruptRecord(f"snapshot {self.snapshot.id!r}, entry {row.path!r}: {why}")

    def place(self, row: SnapshotFileRow) -> str:
        """The full path of ``row``'s entry, refused unless it lies in a folder made here."""
        parts = row.path.split("/")
        if row.path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in row.path:
            raise self.corrupt(row, "its path would leave the restored folder")
        if "/".join(parts[:-1]) not in self.folders:
            raise self.corrupt(row, "it is not inside a folder of the snapshot")
        if row.kind not in _KINDS:
            raise self.corrupt(row, f"unknown kind {row.kind!r}")
        return os.path.join(self.staging, *parts)

    def add(self, row: SnapshotFileRow) -> None:
        if row.path == ROOT:
            self.root = row
            return
        full = self.place(row)
        if row.kind == "dir":
            os.mkdir(full, 0o700)
            self.folders.add(row.path)
            self.dated.append((full, row.mode, row.mtime_ns))
        elif row.kind == "link":
            if row.target is None:
                raise self.corrupt(row, "a link without a target")
            os.symlink(row.target, full)
            os.utime(full, ns=(row.mtime_ns, row.mtime_ns), follow_symlinks=False)
        else:
            self.start_file(row, full)

    def start_file(self, row: SnapshotFileRow, full: str) -> None:
        listed = row.chunks or b""
        if len(listed) % 32:
            raise self.corrupt(row, "its chunk list is cut short")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        file = _File(row, os.open(full, flags, 0o600), len(listed) // 32)
        self.open[file.fd] = file
        if not file.left:
            self.end_file(file)
        for start in range(0, len(listed), 32):
            digest = listed[start : start + 32]
            self.pending.append((file, self.pool.submit(self.fetch, row, digest)))
            while len(self.pending) > _AHEAD:
                self.write_next()

    def fetch(self, row: SnapshotFileRow, digest: bytes) -> bytes:
        stored = self.store.snapshot_chunk(digest)
        if stored is None:
            raise self.corrupt(row, f"chunk {digest.hex()} is not in the store")
        where = f"snapshot {self.snapshot.id!r}, file {row.path!r}"
        return opened(stored, digest, where, self.store.keyring)

    def write_next(self) -> None:
        file, future = self.pending.popleft()
        view = memoryview(future.result())
        file.written += len(view)
        while view:
            view = view[os.write(file.fd, view) :]
        file.left -= 1
        if not file.left:
            self.end_file(file)

    def end_file(self, file: _File) -> None:
        del self.open[file.fd]
        try:
            if file.written != file.row.size:
                raise self.corrupt(
                    file.row, f"its chunks hold {file.written} bytes, not {file.row.size}"
                )
            os.fchmod(file.fd, file.row.mode)
            os.utime(file.fd, ns=(file.row.mtime_ns, file.row.mtime_ns))
        finally:
            os.close(file.fd)

    def finish(self) -> None:
        """The last files, then folders' modes and times, deepest first (a read-only folder
        is closed last)."""
        while self.pending:
            self.write_next()
        for full, mode, mtime in reversed(self.dated):
            os.chmod(full, mode)
            os.utime(full, ns=(mtime, mtime))
        if self.root is not None:
            os.chmod(self.staging, self.root.mode)
            os.utime(self.staging, ns=(self.root.mtime_ns, self.root.mtime_ns))

    def close(self) -> None:
        """Stop reading chunks and close what is still open (after a failure)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for fd in self.open:
            os.close(fd)
        self.open.clear()


def restore_tree(store: Store, snapshot: SnapshotRow, path: str) -> None:
    """Recreate ``snapshot``'s tree at ``path`` (missing or an empty folder)."""
    target = _target(path)
    parent, name = os.path.split(target)
    staging = tempfile.mkdtemp(prefix=f".{name}.restoring-", dir=parent)
    building = _Building(store, snapshot, staging)
    try:
        for row in _rows(store, snapshot.id):
            building.add(row)
        building.finish()
        os.rename(staging, target)  # replaces an empty folder
    except BaseException:
        building.close()
        _remove(staging)
        raise
    building.close()


def _remove(staging: str) -> None:
    """Delete a half-built tree, read-only folders included."""
    for folder, _subdirs, _files in os.walk(staging):
        if not os.path.islink(folder):
            os.chmod(folder, 0o700)
    shutil.rmtree(staging, ignore_errors=True)
