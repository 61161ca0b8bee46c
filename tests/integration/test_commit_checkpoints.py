"""SQLite's write-ahead log is copied into the database by the write pipeline's commit leader,
after its commit and on a connection of its own (``_store/checkpoints.py``'s
``CommitCheckpoints``), before it reaches the 1,000 pages at which the store's connection
would copy it inside a commit, holding up every write queued behind it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from stalwart._store import Entry
from stalwart._store.base import NewRun
from stalwart._store.sqlite import SQLiteStore

pytestmark = pytest.mark.timeout(120)

AUTOCHECKPOINT_PAGES = 1000  # SQLite's default, the store's connection's


def _new(wid: str) -> NewRun:
    return NewRun(
        workflow_id=wid,
        name="agent",
        status="running",
        queue="default",
        priority=0,
        input=b"J" + b"1" * 2000,
        now=100.0,
        owner="w1",
        lease_until=1e9,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _step(seq: int) -> Entry:
    return Entry(
        kind="step", name="s", status="completed", seq=seq, position=str(seq - 1), attempt=1
    )


def _log_pages(path: Path, page_size: int) -> int:
    """The most pages the log ever held: its file keeps its longest length."""
    wal = path.with_name(path.name + "-wal")
    return (wal.stat().st_size - 32) // (page_size + 24)


def test_the_commit_leader_copies_the_log_before_a_commit_would(tmp_path: Path) -> None:
    path = tmp_path / "stalwart.db"
    store = SQLiteStore(f"sqlite:///{path}", str(path), durability="process")
    try:
        page_size = store._run(lambda conn: conn.execute("PRAGMA page_size").fetchone()[0])
        # one write a commit, each its own leader: far more pages than the log's limit, and
        # the log was copied (and started over) each time before it reached it
        for i in range(300):
            store.create_runs([_new(f"r{i}")])
            assert store.append(f"r{i}", _step(1), owner="w1")
        assert _log_pages(path, page_size) < AUTOCHECKPOINT_PAGES
        assert store._copies is not None and store._copies._frames > 0

        # many writers at once: writes go on while a leader copies (the log may then pass
        # the limit for a while), and every write is there

        def steps(first: int) -> None:
            for i in range(first, 300, 8):
                for seq in range(2, 6):
                    assert store.append(f"r{i}", _step(seq), owner="w1")

        threads = [threading.Thread(target=steps, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=100)

        for i in range(300):
            assert [e.seq for e in store.journal(f"r{i}") if e.kind == "step"] == [1, 2, 3, 4, 5]
    finally:
        store.close()


def test_a_closed_store_leaves_no_checkpointing_connection(tmp_path: Path) -> None:
    path = tmp_path / "stalwart.db"
    store = SQLiteStore(f"sqlite:///{path}", str(path), durability="power")
    for i in range(100):
        store.create_runs([_new(f"r{i}")])
    copies = store._copies
    assert copies is not None and copies._conn is not None
    store.close()
    assert copies._conn is None
    copies.committed(10_000)  # a leader finishing after the close copies nothing
    assert copies._conn is None


def test_a_commit_led_on_an_event_loop_has_its_log_copied_off_the_loop(tmp_path: Path) -> None:
    """A lone async run's write commits in place on the app's loop (``GroupCommit``); the log
    copy that commit makes due is made by a thread of its own, not on the loop."""
    path = tmp_path / "stalwart.db"
    store = SQLiteStore(f"sqlite:///{path}", str(path), durability="process")
    copies = store._copies
    assert copies is not None
    threads: list[str] = []
    real = copies._copy

    def noted() -> None:
        threads.append(threading.current_thread().name)
        real()

    copies._copy = noted  # type: ignore[method-assign]
    try:
        store.create_runs([_new("r1")])

        async def on_the_loop() -> str:
            copies._writes = copies._due  # the next commit makes a copy due
            copies.committed(1)
            return threading.current_thread().name

        loop_thread = asyncio.run(on_the_loop())
        with copies._lock:  # taken while a copy is under way: here, once it ended
            pass
        assert threads and threads[0] != loop_thread
        copies._writes = copies._due
        copies.committed(1)  # off a loop: in the leader's own thread, as before
        assert threads[1] == threading.current_thread().name
    finally:
        store.close()
