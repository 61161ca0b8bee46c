"""The snapshot verbs on every backend: a chunk's use is recorded only where the chunk is
stored, an interrupted snapshot is invisible, entries page in bytewise path order, and a run's
snapshots are dropped whole while the chunks stay."""

from __future__ import annotations

import hashlib

import pytest
from test_store_contract import _create

from stalwart._store import Store
from stalwart._store.snapshots import SnapshotFileRow, StoredChunk

pytestmark = pytest.mark.timeout(60)


def _chunk(data: bytes) -> StoredChunk:
    return StoredChunk(hashlib.sha256(data).digest(), len(data), b"z" + data)


def _file(path: str, kind: str = "file", chunks: bytes | None = None) -> SnapshotFileRow:
    return SnapshotFileRow(path, kind, 0o644, 0, 1, None, chunks)


def test_a_snapshot_needs_its_run_and_is_listed_once_complete(store: Store) -> None:
    assert not store.begin_snapshot("s@nobody", workflow_id="nobody", name="w", now=1.0)
    _create(store)
    assert store.begin_snapshot("s1@r1", workflow_id="r1", name="w", now=1.0)
    assert store.begin_snapshot("s2@r1", workflow_id="r1", name="w", now=1.0)
    assert store.run_snapshots("r1") == [] and store.last_snapshot("r1", "w") is None
    assert store.finish_snapshot("s2@r1", files=0, bytes=0, stored_bytes=0)
    assert store.finish_snapshot("s1@r1", files=3, bytes=30, stored_bytes=7)
    assert not store.finish_snapshot("s1@r1", files=3, bytes=30, stored_bytes=7)
    assert [s.id for s in store.run_snapshots("r1")] == ["s1@r1", "s2@r1"]  # by number
    last = store.last_snapshot("r1", "w")
    assert last is not None and last.id == "s2@r1"
    row = store.get_snapshot("s1@r1")
    assert row is not None and (row.files, row.bytes, row.stored_bytes) == (3, 30, 7)


def test_a_chunk_is_stored_once_and_used_only_where_stored(store: Store) -> None:
    _create(store)
    store.begin_snapshot("s1@r1", workflow_id="r1", name="w", now=1.0)
    a, b = _chunk(b"a" * 100), _chunk(b"b" * 100)
    assert store.put_chunks("s1@r1", [a, b], now=1.0).stored_bytes == 202
    assert store.put_chunks("s1@r1", [a], now=1.0).stored_bytes == 0  # stored already
    assert store.snapshot_chunk(a.digest) == a.data
    gone = StoredChunk(hashlib.sha256(b"never").digest(), 5, None)
    wrote = store.put_chunks("s1@r1", [StoredChunk(b.digest, 100, None), gone], now=1.0)
    assert wrote.missing == (gone.digest,) and wrote.stored_bytes == 0
    assert store.snapshot_chunk(gone.digest) is None
    c = _chunk(b"c" * 100)
    assert store.put_chunks("s1@r1", [c, gone], now=1.0).missing == (gone.digest,)
    assert store.snapshot_chunk(c.digest) is None  # the whole batch was rolled back


def test_entries_page_in_bytewise_path_order(store: Store) -> None:
    _create(store)
    store.begin_snapshot("s1@r1", workflow_id="r1", name="w", now=1.0)
    paths = ["a/c", ".", "a", "a-b", "B", "a/b/é", "a/b"]
    store.put_snapshot_files("s1@r1", [_file(p, "dir") for p in paths])
    got, after = [], ""
    while page := store.snapshot_files("s1@r1", after=after, limit=2):
        got += [row.path for row in page]
        after = page[-1].path
    assert got == sorted(paths, key=lambda p: p.encode())


def test_dropping_a_runs_snapshots_keeps_the_chunks(store: Store) -> None:
    _create(store)
    store.begin_snapshot("s1@r1", workflow_id="r1", name="w", now=1.0)
    a = _chunk(b"a" * 100)
    store.put_chunks("s1@r1", [a], now=1.0)
    store.put_snapshot_files("s1@r1", [_file("x", chunks=a.digest)])
    store.finish_snapshot("s1@r1", files=1, bytes=100, stored_bytes=101)
    assert store.drop_snapshots("r1") == 1
    assert store.get_snapshot("s1@r1") is None
    assert store.snapshot_files("s1@r1", after="", limit=10) == []
    assert store.snapshot_chunk(a.digest) == a.data
    assert store.drop_snapshots("r1") == 0


def test_bulk_writes_pace_big_writes_and_lose_none(store: Store) -> None:
    """Inside ``bulk_writes`` (nested, as snapshots nest it) every write commits and reads back,
    and the store is its plain self after it."""
    _create(store)
    store.begin_snapshot("s1@r1", workflow_id="r1", name="w", now=1.0)
    chunks = [_chunk(bytes([i]) * 300_000) for i in range(8)]
    with store.bulk_writes():
        with store.bulk_writes():
            assert store.put_chunks("s1@r1", chunks[:4], now=1.0).stored_bytes > 0
        assert store.put_chunks("s1@r1", chunks[4:], now=1.0).stored_bytes > 0
    assert all(store.snapshot_chunk(c.digest) == c.data for c in chunks)
    assert store.finish_snapshot("s1@r1", files=0, bytes=0, stored_bytes=0)
