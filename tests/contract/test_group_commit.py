"""The write pipeline of a store: writes that arrive while a commit is under way share the next
transaction; a lost lease fails its own write, not its batch's; an unexpected error leaves the
others to commit, each alone, and reaches only its own caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from stalwart._store import Entry
from stalwart._store.base import NewRun
from stalwart._store.group_commit import BATCH_LIMIT
from stalwart._store.sql.pipeline import Write

pytestmark = pytest.mark.timeout(60)


def _create(store: Any, wid: str, owner: str) -> None:
    assert store.create_run(
        workflow_id=wid,
        name="agent",
        status="running",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=100.0,
        owner=owner,
        lease_until=130.0,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _step(seq: int) -> Entry:
    return Entry(
        kind="step", name="s", status="completed", seq=seq, position=str(seq - 1), attempt=1
    )


def _together(
    store: Any, calls: list[Callable[[], Any]], writes: int | None = None
) -> tuple[list[Any], list[int]]:
    """Run ``calls`` in threads while a commit is under way, so they queue for the next one
    (``writes`` of them, by default one a call); what each returned (or raised), and the sizes
    of the batches committed together."""
    gate = threading.Event()
    batches: list[int] = []
    real = store._write_together

    def counted(writes: list[Write]) -> list[Any]:
        batches.append(len(writes))
        return real(writes)

    store._write_together = counted
    blocker = threading.Thread(
        target=store._batched, args=(Write("blocker", lambda _conn: True, gate.wait),)
    )
    blocker.start()
    while not store._pipeline._busy:
        time.sleep(0.001)
    results: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    while len(store._pipeline._queue) < (writes or len(calls)):
        time.sleep(0.001)
    gate.set()
    for thread in [blocker, *threads]:
        thread.join(timeout=30)
    del store._write_together
    return results, batches


def test_a_lost_lease_fails_its_own_write_and_the_batch_commits_the_others(store: Any) -> None:
    for wid in ("r1", "r2", "r3"):
        _create(store, wid, "w1")
    claim = store.take_lease("r2", owner="w2", expected_owner="w1", now=200.0, lease_until=230.0)
    assert claim.taken  # w1's lease on r2 lapsed and w2 took it

    results, batches = _together(
        store,
        [
            lambda: store.append("r1", _step(1), owner="w1"),
            lambda: store.append("r2", _step(1), owner="w1"),
            lambda: store.append("r3", _step(1), owner="w1"),
        ],
    )

    assert results == [True, False, True]
    assert batches == [3]  # one transaction, which the lost lease did not abort
    assert [r.seq for r in store.replay_index("r1")] == [1]
    assert [r.seq for r in store.replay_index("r2")] == []
    assert [r.seq for r in store.replay_index("r3")] == [1]


def test_an_unexpected_error_reaches_its_caller_alone(store: Any) -> None:
    for wid in ("r1", "r2"):
        _create(store, wid, "w1")

    def broken(_conn: Any) -> bool:
        raise RuntimeError("a bug in one write")

    def broken_alone() -> bool:
        raise RuntimeError("a bug in one write")

    results, batches = _together(
        store,
        [
            lambda: store.append("r1", _step(1), owner="w1"),
            lambda: store._batched(Write("r1", broken, broken_alone)),
            lambda: store.append("r2", _step(1), owner="w1"),
        ],
    )

    assert results[0] is True and results[2] is True
    assert isinstance(results[1], RuntimeError)
    assert batches == [3]  # tried together, rolled back, then each alone
    assert [r.seq for r in store.replay_index("r1")] == [1]
    assert [r.seq for r in store.replay_index("r2")] == [1]


def _new(wid: str) -> NewRun:
    return NewRun(
        workflow_id=wid,
        name="agent",
        status="pending",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=100.0,
        owner=None,
        lease_until=None,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def test_runs_created_together_share_one_transaction_and_a_repeat_is_refused(
    store: Any,
) -> None:
    _create(store, "old", "w1")
    results, batches = _together(
        store,
        [
            lambda: store.create_runs([_new("a1"), _new("a2"), _new("a3")]),
            lambda: store.create_runs([_new("b1"), _new("old"), _new("b2")]),
            lambda: store.append("old", _step(1), owner="w1"),
        ],
        writes=7,
    )
    assert results == [[True, True, True], [True, False, True], True]
    assert batches == [7]  # the two batches of runs and the step: one transaction
    assert store.get_run("b2").status == "pending"
    assert store.get_run("old").status == "running"  # the repeat changed nothing


def test_more_runs_than_one_transaction_takes_are_all_created_in_order(store: Any) -> None:
    calls = 3
    ids = [[f"t{t}-{i}" for i in range(BATCH_LIMIT + 40)] for t in range(calls)]
    results: list[Any] = [None] * calls

    def create(t: int) -> None:
        results[t] = store.create_runs([_new(wid) for wid in ids[t]])

    threads = [threading.Thread(target=create, args=(t,)) for t in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=50)
    assert results == [[True] * len(ids[0])] * calls
    assert all(store.get_run(wid) is not None for each in ids for wid in each)
