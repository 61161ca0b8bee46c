"""A lone async run's write commits in place on the app's loop (SQLite), and never makes the
loop wait: while another process holds the database's write lock, or another thread of this
process the store's connection, the write goes to the pipeline's thread and the loop goes on.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from batches import batch_sizes, committing_threads
from stalwart._store import Entry
from stalwart._store.group_commit import NO_WAIT, own_loop
from stalwart._store.sqlite import SQLiteStore

pytestmark = pytest.mark.timeout(60)

HELD_S = 10.0  # how long the lock is held at most while the loop is asked to answer


def _step(seq: int) -> Entry:
    return Entry(
        kind="step", name="s", status="completed", seq=seq, position=str(seq - 1), attempt=1
    )


def _running(store: SQLiteStore, wid: str) -> None:
    """A running run ``wid``, held by ``w1``."""
    assert store.create_run(
        workflow_id=wid,
        name="agent",
        status="running",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=100.0,
        owner="w1",
        lease_until=10.0**10,
        entry=Entry(kind="run", name="started", status="completed"),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    path = tmp_path / "stalwart.db"
    opened = SQLiteStore(f"sqlite:///{path}", str(path), durability="process")
    _running(opened, "r1")
    try:
        yield opened
    finally:
        opened.close()


def _another_process_writing(store: SQLiteStore) -> tuple[Callable[[], None], Callable[[], None]]:
    """Hold the database's write lock from a connection of its own, as a second process
    does while it writes."""
    assert store._path is not None
    other = sqlite3.connect(store._path, isolation_level=None, check_same_thread=False)
    return (lambda: other.execute("BEGIN IMMEDIATE"), lambda: (other.rollback(), other.close()))


def _another_thread_using_the_connection(
    store: SQLiteStore,
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Hold the store's connection from another thread of this process, as one does while
    its statement waits for the database."""
    taken, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with store._lock:
            taken.set()
            release.wait(60)
        done.set()

    def begin() -> None:
        threading.Thread(target=hold, daemon=True).start()
        assert taken.wait(30)

    def end() -> None:
        release.set()
        assert done.wait(30)

    return begin, end


@pytest.mark.parametrize("writes", [1, 5], ids=["a-lone-write", "a-batch"])
@pytest.mark.parametrize(
    "holder",
    [_another_process_writing, _another_thread_using_the_connection],
    ids=["another-process-writes", "another-thread-uses-the-connection"],
)
def test_a_commit_led_in_place_never_makes_the_loop_wait(
    store: SQLiteStore, holder: Callable[[SQLiteStore], tuple[Any, Any]], writes: int
) -> None:
    """While the lock is held, the loop's commit (a lone write's, or a batch's) is refused at
    once (the connection: after a moment) having written nothing, and goes whole to the
    pipeline's threads; the loop answers meanwhile, and every write lands once the lock is
    free."""
    ids = ["r1", *_runs(store, writes - 1)]
    hold, release = holder(store)
    answered = threading.Event()
    answered_while_held: list[bool] = []

    def ask_the_loop(loop: asyncio.AbstractEventLoop) -> None:
        # once the commit was tried in place and handed on, the loop answers at once; the
        # lock is released only after (or once HELD_S is over, when the loop is stuck)
        try:
            deadline = time.monotonic() + HELD_S
            while len(threads) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            loop.call_soon_threadsafe(answered.set)
            answered_while_held.append(answered.wait(HELD_S))
        finally:
            release()

    async def main() -> tuple[list[bool], int]:
        loop = asyncio.get_running_loop()
        own_loop(loop)
        asker = threading.Thread(target=ask_the_loop, args=(loop,), daemon=True)
        asker.start()
        appends = [store.append_async(wid, _step(1), owner="w1") for wid in ids]
        results = list(await asyncio.gather(*appends))
        await asyncio.to_thread(asker.join, 30)
        return results, threading.get_ident()

    hold()
    with committing_threads(store) as threads, batch_sizes(store) as batches:
        results, loop_thread = asyncio.run(main())
    assert answered_while_held == [True], "the loop waited for the lock"
    assert results == [True] * len(ids)
    assert threads[0] == loop_thread  # tried in place, refused, then led elsewhere
    assert threads[1:] and loop_thread not in threads[1:]
    assert batches == ([] if writes == 1 else [writes, writes])  # refused whole, then whole
    for wid in ids:
        assert [r.seq for r in store.replay_index(wid)] == [1]


def test_the_next_lone_write_commits_in_place_again(store: SQLiteStore) -> None:
    """Once the lock is free, a lone async write commits in place again (with the busy
    timeout of 0 it set for itself), and a thread's write after it waits for locks again."""

    async def main() -> list[bool]:
        own_loop(asyncio.get_running_loop())
        return [await store.append_async("r1", _step(seq), owner="w1") for seq in (1, 2)]

    assert asyncio.run(main()) == [True, True]
    assert store._busy_ms == 0
    assert store.append("r1", _step(3), owner="w1") is True
    assert store._busy_ms > 0
    assert [r.seq for r in store.replay_index("r1")] == [1, 2, 3]


def test_what_follows_a_commit_led_in_place_runs_without_no_wait(store: SQLiteStore) -> None:
    """A write that queued during a commit led in place is handed to the pipeline's thread
    outside ``NO_WAIT``: where threads inherit their starter's context (Python 3.14's
    free-threaded builds), the thread started there would otherwise refuse to wait for good."""
    other_loop = asyncio.new_event_loop()
    runner = threading.Thread(target=other_loop.run_forever, daemon=True)
    runner.start()
    real_commit, real_elsewhere = store._pipeline._commit, store._pipeline._lead_elsewhere
    handed: list[bool] = []
    queued: list[Any] = []

    def commit(batch: Any) -> None:
        if not queued:  # the commit led in place: another loop's write queues meanwhile
            queued.append(
                asyncio.run_coroutine_threadsafe(
                    store.append_async("r1", _step(2), owner="w1"), other_loop
                )
            )
            deadline = time.monotonic() + 30
            while not store._pipeline._queue and time.monotonic() < deadline:
                time.sleep(0.001)
        real_commit(batch)

    def elsewhere() -> None:
        handed.append(NO_WAIT.get())
        real_elsewhere()

    store._pipeline._commit = commit
    store._pipeline._lead_elsewhere = elsewhere  # type: ignore[method-assign]

    async def main() -> bool:
        own_loop(asyncio.get_running_loop())
        return await store.append_async("r1", _step(1), owner="w1")

    try:
        assert asyncio.run(main()) is True
        assert queued[0].result(30) is True
    finally:
        store._pipeline._commit = real_commit
        store._pipeline._lead_elsewhere = real_elsewhere  # type: ignore[method-assign]
        other_loop.call_soon_threadsafe(other_loop.stop)
        runner.join(30)
        other_loop.close()
    assert handed and not any(handed)
    assert [r.seq for r in store.replay_index("r1")] == [1, 2]


def _runs(store: SQLiteStore, count: int) -> list[str]:
    """``count`` more running runs held by ``w1`` (``r1`` is the fixture's)."""
    ids = [f"r{i}" for i in range(2, count + 2)]
    for wid in ids:
        _running(store, wid)
    return ids


def test_the_writes_of_many_runs_on_the_loop_commit_together_in_place(
    store: SQLiteStore,
) -> None:
    """Runs on an app's loop that reach a commit together share one transaction, which the
    loop leads itself once what was ready on it has run: no thread is handed the batch."""
    ids = _runs(store, 20)

    async def main() -> tuple[list[bool], int]:
        own_loop(asyncio.get_running_loop())
        appends = [store.append_async(wid, _step(1), owner="w1") for wid in ids]
        return list(await asyncio.gather(*appends)), threading.get_ident()

    with committing_threads(store) as threads, batch_sizes(store) as batches:
        results, loop_thread = asyncio.run(main())
    assert results == [True] * len(ids)
    assert threads == [loop_thread]
    assert batches == [len(ids)]
    for wid in ids:
        assert [r.seq for r in store.replay_index(wid)] == [1]


def test_a_thread_that_writes_first_commits_the_writes_the_loop_queued(
    store: SQLiteStore,
) -> None:
    """Writes queued for the loop's commit are not claimed by it: a thread that writes before
    the loop gets to it leads the next commit, theirs with its own, and the loop's turn then
    finds nothing left to do."""
    ids = _runs(store, 3)

    async def main() -> tuple[list[bool], list[bool], int]:
        own_loop(asyncio.get_running_loop())
        thread_wrote: list[bool] = []

        async def interloper() -> None:
            # runs after the appends queued their writes and before the loop's turn to commit
            # them; blocks the loop until the thread's write committed
            writer = threading.Thread(
                target=lambda: thread_wrote.append(store.append("r1", _step(1), owner="w1"))
            )
            writer.start()
            writer.join(30)

        appends = [store.append_async(wid, _step(1), owner="w1") for wid in ids]
        *results, _ = await asyncio.gather(*appends, interloper())
        return list(results), thread_wrote, threading.get_ident()

    with committing_threads(store) as threads, batch_sizes(store) as batches:
        results, thread_wrote, loop_thread = asyncio.run(main())
    assert results == [True] * len(ids)
    assert thread_wrote == [True]
    assert batches == [len(ids) + 1]
    assert len(threads) == 1 and threads[0] != loop_thread
    for wid in ["r1", *ids]:
        assert [r.seq for r in store.replay_index(wid)] == [1]


def test_a_cancellation_asked_after_the_loop_queued_its_commit_comes_too_late(
    store: SQLiteStore,
) -> None:
    """The loop's commit of the writes queued on it runs before a cancellation asked meanwhile
    reaches its task: the batch holds the write, so the caller returns what it decided (the
    cancellation taken back, as for any batch that holds a write), and the journal says so."""
    ids = _runs(store, 3)

    async def main() -> list[Any]:
        own_loop(asyncio.get_running_loop())
        tasks = [
            asyncio.ensure_future(store.append_async(wid, _step(1), owner="w1")) for wid in ids
        ]

        async def canceller() -> None:
            tasks[1].cancel()  # its write is queued; the loop's commit comes before the error

        await asyncio.gather(*tasks, canceller(), return_exceptions=True)
        return [("cancelled" if task.cancelled() else task.result()) for task in tasks]

    with batch_sizes(store) as batches:
        outcomes = asyncio.run(main())
    assert outcomes == [True, True, True]
    assert batches == [3]
    for wid in ids:
        assert [r.seq for r in store.replay_index(wid)] == [1]


def test_a_batch_led_on_the_loop_that_fails_is_done_write_by_write_by_a_thread(
    store: SQLiteStore,
) -> None:
    """A batch whose writes together fail for another reason than a lock is done write by
    write, each reporting its own error: by a thread, not by the loop that led it (up to a
    batch's worth of transactions)."""
    ids = _runs(store, 5)
    real_together = store._write_together
    failed: list[bool] = []

    def fails_once(writes: Any) -> Any:
        if not failed:
            failed.append(True)
            raise RuntimeError("a write of the batch broke it")
        return real_together(writes)

    store._write_together = fails_once  # type: ignore[method-assign]
    alone: list[int] = []
    real_alone = store._append_alone

    def noted(*args: Any, **kwargs: Any) -> Any:
        alone.append(threading.get_ident())
        return real_alone(*args, **kwargs)

    store._append_alone = noted  # type: ignore[method-assign]

    async def main() -> tuple[list[bool], int]:
        own_loop(asyncio.get_running_loop())
        appends = [store.append_async(wid, _step(1), owner="w1") for wid in ids]
        return list(await asyncio.gather(*appends)), threading.get_ident()

    try:
        results, loop_thread = asyncio.run(main())
    finally:
        store._write_together = real_together  # type: ignore[method-assign]
        store._append_alone = real_alone  # type: ignore[method-assign]
    assert results == [True] * len(ids)
    assert failed == [True]
    assert loop_thread not in alone
    for wid in ids:
        assert [r.seq for r in store.replay_index(wid)] == [1]
