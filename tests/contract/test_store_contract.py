"""The store contract: each verb is atomic and fenced by its precondition, on every backend."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest

from stalwart import NotDurableWarning
from stalwart._store import Entry, Store, open_store
from stalwart._store.base import QueueLimits


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotDurableWarning)
        instance = open_store(store_url)
    yield instance
    instance.close()


def _create(store: Store, wid: str = "r1", owner: str | None = "w1", now: float = 100.0) -> bool:
    return store.create_run(
        workflow_id=wid,
        name="agent",
        status="running" if owner else "pending",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=now,
        owner=owner,
        lease_until=now + 30,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _step(seq: int, output: bytes = b"J1") -> Entry:
    return Entry(
        kind="step",
        name="s",
        status="completed",
        seq=seq,
        position=str(seq - 1),
        attempt=1,
        output=output,
    )


def test_create_run_is_idempotent_per_id(store: Store) -> None:
    assert _create(store)
    assert not _create(store, owner="w2")
    row = store.get_run("r1")
    assert row is not None and row.lease_owner == "w1" and row.status == "running"
    assert [r.name for r in store.journal("r1")] == ["started"]
    assert store.get_run("missing") is None


def test_appends_are_fenced_by_the_lease(store: Store) -> None:
    _create(store)
    assert store.append("r1", _step(1), owner="w1")
    assert not store.append("r1", _step(2), owner="intruder")
    assert [r.seq for r in store.replay_index("r1")] == [1]


def test_take_lease_is_compare_and_set(store: Store) -> None:
    _create(store)
    assert not store.take_lease(
        "r1", owner="w2", expected_owner=None, now=200, lease_until=230
    ).taken
    assert store.take_lease("r1", owner="w2", expected_owner="w1", now=200, lease_until=230).taken
    assert not store.take_lease(
        "r1", owner="w3", expected_owner="w1", now=200, lease_until=230
    ).taken
    assert not store.append("r1", _step(1), owner="w1")  # the old holder's write fails
    assert store.append("r1", _step(1), owner="w2")
    assert store.renew_lease("r1", owner="w2", lease_until=300) is False  # held, not cancelled
    assert store.renew_lease("r1", owner="w1", lease_until=300) is None  # lost
    assert store.release_lease("r1", owner="w2", now=210)
    row = store.get_run("r1")
    assert row is not None and row.lease_owner is None and row.status == "running"
    _create(store, "p1", owner=None)
    assert store.take_lease("p1", owner="w4", expected_owner=None, now=1, lease_until=2).taken
    row = store.get_run("p1")
    assert row is not None and row.status == "running"


def test_finish_run_is_fenced_and_final(store: Store) -> None:
    _create(store)
    done = Entry(kind="run", name="finished", status="completed")
    assert not store.finish_run(
        "r1", owner="w2", status="completed", output=b"J1", error=None, now=5, entry=done
    )
    assert store.finish_run(
        "r1", owner="w1", status="completed", output=b"J1", error=None, now=5, entry=done
    )
    row = store.get_run("r1")
    assert row is not None and (row.status, row.output, row.lease_owner) == (
        "completed",
        b"J1",
        None,
    )
    assert not store.take_lease("r1", owner="w1", expected_owner=None, now=6, lease_until=7).taken
    assert [r.name for r in store.journal("r1")] == ["started", "finished"]


def test_payloads_inline_or_by_digest(store: Store) -> None:
    _create(store)
    big = b"J" + b'"' + b"x" * 5000 + b'"'
    store.append("r1", _step(1, big), owner="w1")
    store.append("r1", _step(2, big), owner="w1")
    store.append("r1", _step(3, b"J2"), owner="w1")
    index = store.replay_index("r1")
    assert [len(r.output or b"") for r in index] == [33, 33, 2]
    assert store.load_payload(index[0].output or b"") == big
    assert store.load_payload(b"J2") == b"J2"
    assert [r.output for r in store.journal("r1")][1:] == [big, big, b"J2"]


def test_list_runs_filters_and_pages(store: Store) -> None:
    for i in range(4):
        _create(store, f"r{i}", owner=None, now=float(i))
    store.take_lease("r3", owner="w", expected_owner=None, now=9, lease_until=10)
    newest = store.list_runs(status=None, name=None, limit=10, before=None)
    assert [r.workflow_id for r in newest] == ["r3", "r2", "r1", "r0"]
    assert [
        r.workflow_id for r in store.list_runs(status="pending", name=None, limit=10, before=2.0)
    ] == ["r1", "r0"]
    assert store.list_runs(status=None, name="other", limit=10, before=None) == []
    assert len(store.list_runs(status=None, name="agent", limit=1, before=None)) == 1


def test_recoveries_in_a_row_count_only_without_progress(store: Store) -> None:
    _create(store)

    def recover(previous: str, new: str) -> int:
        claim = store.take_lease(
            "r1",
            owner=new,
            expected_owner=previous,
            now=1,
            lease_until=2,
            recovery=True,
            holder_gone=True,
        )
        assert claim.taken
        return claim.recoveries

    assert recover("w1", "w2") == 1
    assert recover("w2", "w3") == 2
    assert store.append("r1", _step(1), owner="w3")  # progress resets the count
    assert recover("w3", "w4") == 1
    assert recover("w4", "w5") == 2
    claim = store.take_lease(
        "r1", owner="w6", expected_owner="w5", now=1, lease_until=2, holder_gone=True
    )
    assert claim.taken and claim.recoveries == 0  # a plain takeover (not a crash) clears it
    assert recover("w6", "w7") == 1


def test_a_live_lease_is_not_taken(store: Store) -> None:
    _create(store, now=100.0)  # leased until 130
    assert not store.take_lease(
        "r1", owner="w2", expected_owner="w1", now=120, lease_until=150
    ).taken
    assert store.take_lease("r1", owner="w2", expected_owner="w1", now=131, lease_until=160).taken
    assert store.take_lease(
        "r1", owner="w3", expected_owner="w2", now=132, lease_until=170, holder_gone=True
    ).taken


def _take(store: Store, wid: str, owner: str, now: float, limits: QueueLimits) -> bool:
    return store.take_lease(
        wid, owner=owner, expected_owner=None, now=now, lease_until=now + 30, limits=limits
    ).taken


def test_queue_concurrency_counts_running_runs_and_spares_takeovers(store: Store) -> None:
    limits = QueueLimits(concurrency=1)
    for wid in ("a", "b"):
        _create(store, wid, owner=None)
    assert _take(store, "a", "w1", 100.0, limits)
    assert not _take(store, "b", "w2", 100.0, limits)  # the queue's one slot is taken
    # Taking over a running run whose lease lapsed needs no slot: it holds one already.
    assert store.take_lease(
        "a", owner="w3", expected_owner="w1", now=200.0, lease_until=230.0, limits=limits
    ).taken
    assert store.suspend_run("a", owner="w3", wake_at=None, waiting_for="event:go", now=201.0)
    assert _take(store, "b", "w2", 201.0, limits)  # a suspended run holds no slot


def test_queue_rate_counts_starts_in_a_sliding_period(store: Store) -> None:
    limits = QueueLimits(rate=2, period=10.0)
    for wid in ("a", "b", "c"):
        _create(store, wid, owner=None)
    assert _take(store, "a", "w1", 100.0, limits)
    assert _take(store, "b", "w1", 105.0, limits)
    assert not _take(store, "c", "w1", 109.9, limits)
    assert store.next_start("default", limits) == pytest.approx(110.0)
    assert _take(store, "c", "w1", 110.1, limits)  # the start at 100 left the window
    assert store.next_start("default", QueueLimits(concurrency=3)) is None


def test_another_connections_change_moves_the_data_version(shared_url: str) -> None:
    """What lets an idle worker wake at once: SQLite's data_version, PostgreSQL's NOTIFY."""
    watcher, writer = open_store(shared_url), open_store(shared_url)
    try:
        watcher.data_version()  # on PostgreSQL, the first read starts listening
        time.sleep(0.5)
        before = watcher.data_version()
        deadline = time.monotonic() + 10
        _create(writer, "woken", owner=None)
        while watcher.data_version() == before and time.monotonic() < deadline:
            time.sleep(0.005)
        assert watcher.data_version() != before, "no wake-up signal after another's commit"
    finally:
        watcher.close()
        writer.close()
