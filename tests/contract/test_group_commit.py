"""The write pipeline of a store: writes that arrive while a commit is under way share the next
transaction; a lost lease fails its own write, not its batch's; an unexpected error leaves the
others to commit, each alone, and reaches only its own caller."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
from typing import Any

import pytest

from batches import batch_sizes, committing_threads, held, queued
from batches import together as _together
from stalwart._model import ErrorRecord, Usage
from stalwart._store import Entry
from stalwart._store.base import NewRun
from stalwart._store.group_commit import BATCH_LIMIT, own_loop
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


def _varied(i: int) -> Entry:
    """A step's outcome of one of the forms a batch carries: completed, with usage, failed."""
    kinds = [
        _step(1),
        dataclasses.replace(_step(1), usage=Usage(10 + i, 2, 0.5), model="m", input=b"J[1]"),
        dataclasses.replace(_step(1), status="failed", error=ErrorRecord("ValueError", f"no {i}")),
    ]
    return dataclasses.replace(kinds[i % 3], started_at=10.0 + i, finished_at=11.0 + i)


def test_a_batch_of_step_outcomes_journals_each_as_its_own_append_would(store: Any) -> None:
    """Seventy outcomes made together (on SQLite: a few multi-row statements) leave the
    journal rows and running totals that seventy appends made one at a time leave."""
    count = 70
    for i in range(count):
        _create(store, f"t{i}", "w1")
        _create(store, f"a{i}", "w1")
    appends = [
        functools.partial(store.append, f"t{i}", _varied(i), owner="w1") for i in range(count)
    ]
    results, batches = _together(store, appends)
    assert results == [True] * count
    assert batches == [count]
    for i in range(count):
        assert store.append(f"a{i}", _varied(i), owner="w1")

    def written(wid: str) -> list[Any]:
        return [dataclasses.replace(row, id=0) for row in store.journal(wid)]

    for i in range(count):
        assert written(f"t{i}") == written(f"a{i}")
        assert store.run_spend(f"t{i}") == store.run_spend(f"a{i}")

    # Leases lost in later statements of the batch (on SQLite, rows 32-63 and 64-69): the
    # rows already written are undone and each write is done alone; only the lost ones fail.
    lost = {40, 66}
    for i in lost:
        assert store.take_lease(
            f"t{i}", owner="w2", expected_owner="w1", now=200.0, lease_until=230.0
        ).taken
    again = [functools.partial(store.append, f"t{i}", _step(2), owner="w1") for i in range(count)]
    results, batches = _together(store, again)
    assert results == [i not in lost for i in range(count)]
    assert batches == [count]
    for i in range(count):
        seqs = [row.seq for row in store.journal(f"t{i}") if row.kind == "step"]
        assert seqs == ([1] if i in lost else [1, 2])


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


def _pending(store: Any, wid: str) -> None:
    run = _new(wid)
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name != "count"}
    assert store.create_run(**fields)


def test_claims_made_together_share_a_transaction_and_a_refusal_fails_only_its_own(
    store: Any,
) -> None:
    for wid in ("p1", "p2", "p3"):
        _pending(store, wid)
    # another worker took p2 first: the batch's claim of it, expecting no holder, is refused
    assert store.take_lease("p2", owner="w1", expected_owner=None, now=110.0, lease_until=140.0)

    def claim(wid: str) -> Any:
        resumed = Entry.milestone("resumed", 120.0)
        return store.take_lease(
            wid, owner="w2", expected_owner=None, now=120.0, lease_until=150.0, entry=resumed
        )

    results, batches = _together(
        store, [lambda: claim("p1"), lambda: claim("p2"), lambda: claim("p3")]
    )

    assert [r.taken for r in results] == [True, False, True]
    assert [r.recoveries for r in results] == [0, 0, 0]
    assert batches == [3]
    for wid, holder in (("p1", "w2"), ("p2", "w1"), ("p3", "w2")):
        assert store.get_run(wid).lease_owner == holder
    assert [e.name for e in store.journal("p1")] == ["started", "resumed"]
    assert [e.name for e in store.journal("p2")] == ["started"]  # the refusal wrote nothing


def test_runs_ended_together_journal_their_charged_attempts_first_and_a_lost_lease_ends_none(
    store: Any,
) -> None:
    for wid in ("r1", "r2", "r3"):
        _create(store, wid, "w1")
    assert store.take_lease("r2", owner="w2", expected_owner="w1", now=200.0, lease_until=230.0)

    def finish(wid: str) -> Any:
        end = Entry(kind="run", name="completed", status="completed", started_at=201.0)
        return store.finish_run(
            wid,
            owner="w1",
            status="completed",
            output=b"J1",
            error=None,
            now=201.0,
            entry=end,
            charged=[_step(1)],
        )

    results, batches = _together(
        store, [lambda: finish("r1"), lambda: finish("r2"), lambda: finish("r3")]
    )

    assert results == [True, False, True]
    assert batches == [3]
    for wid in ("r1", "r3"):
        run = store.get_run(wid)
        assert (run.status, run.lease_owner, run.output) == ("completed", None, b"J1")
        entries = store.journal(wid)
        assert [(e.kind, e.name) for e in entries] == [
            ("run", "started"),
            ("step", "s"),
            ("run", "completed"),
        ]
    run = store.get_run("r2")
    assert (run.status, run.lease_owner) == ("running", "w2")
    assert [e.name for e in store.journal("r2")] == ["started"]  # not even its charged step


def test_async_appends_share_a_transaction_while_their_loop_goes_on(store: Any) -> None:
    """The steps of async runs wait for their commit without holding up the loop they share:
    a task on that loop ends the commit under way, and their three writes then commit
    together (a lost lease failing its own)."""
    for wid in ("r1", "r2", "r3"):
        _create(store, wid, "w1")
    assert store.take_lease("r2", owner="w2", expected_owner="w1", now=200.0, lease_until=230.0)

    async def release_once_queued() -> None:
        deadline = time.monotonic() + 30
        while len(store._pipeline._queue) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)  # the loop runs: the appends do not block it
        gate.set()

    async def main() -> list[Any]:
        appends = [store.append_async(wid, _step(1), owner="w1") for wid in ("r1", "r2", "r3")]
        *results, _ = await asyncio.gather(*appends, release_once_queued())
        return results

    with batch_sizes(store) as batches:
        gate, blocker = held(store)
        try:
            results = asyncio.run(asyncio.wait_for(main(), 30))
        finally:
            gate.set()
            blocker.join(timeout=30)
    assert results == [True, False, True]
    assert batches == [3]
    assert [r.seq for r in store.replay_index("r1")] == [1]
    assert [r.seq for r in store.replay_index("r2")] == []


@pytest.mark.parametrize(
    ("beside", "own"),
    [(True, True), (False, True), (False, False)],
    ids=["busy-own-loop", "alone-on-own-loop", "alone-on-a-callers-loop"],
)
def test_where_an_async_append_is_committed(store: Any, beside: bool, own: bool) -> None:
    """On a loop an app keeps for its runs, where the store's commits are local (SQLite), the
    loop commits an async caller's write itself: at once when nothing else on it could run,
    else once what was ready has run (two hand-offs between threads would cost more than the
    commit). Elsewhere (a store a network could stall) the pipeline's own thread commits it
    while the loop goes on; on a caller's loop (``run_async``), which serves other code, too."""
    _create(store, "r1", "w1")

    async def busy() -> None:
        for _ in range(100):
            await asyncio.sleep(0)

    async def main() -> tuple[bool, int]:
        if own:
            own_loop(asyncio.get_running_loop())
        writing = store.append_async("r1", _step(1), owner="w1")
        if beside:
            held, _ = await asyncio.gather(writing, busy())
        else:
            held = await writing
        return held, threading.get_ident()

    with committing_threads(store) as threads:
        held, loop_thread = asyncio.run(main())
    assert held is True
    in_place = own and store._commits_in_place
    assert threads == [loop_thread] if in_place else (threads and loop_thread not in threads)
    assert [r.seq for r in store.replay_index("r1")] == [1]


def test_a_cancelled_async_caller_withdraws_a_write_no_batch_took(store: Any) -> None:
    """An async caller cancelled while its write waits for the next batch: the write is taken
    back (the caller sees the cancellation, and the journal says nothing of it), and the
    writes queued after it, a thread's among them, commit."""
    for wid in ("r1", "r2"):
        _create(store, wid, "w1")
    gate, blocker = held(store)
    done: list[bool] = []
    behind = threading.Thread(target=lambda: done.append(store.append("r2", _step(1), owner="w1")))

    async def main() -> bool:
        waiting = asyncio.ensure_future(store.append_async("r1", _step(1), owner="w1"))
        await asyncio.to_thread(queued, store, 1)
        behind.start()
        await asyncio.to_thread(queued, store, 2)
        waiting.cancel()
        await asyncio.sleep(0)
        gate.set()
        await asyncio.to_thread(behind.join, 30)
        try:
            await waiting
        except asyncio.CancelledError:
            return True
        return False

    try:
        assert asyncio.run(asyncio.wait_for(main(), 30)) is True
    finally:
        gate.set()
        blocker.join(timeout=30)
    assert done == [True]
    assert [r.seq for r in store.replay_index("r1")] == []
    assert [r.seq for r in store.replay_index("r2")] == [1]


def test_a_cancelled_async_caller_whose_batch_is_committing_gets_what_it_decided(
    store: Any,
) -> None:
    """Once a batch holds an async caller's write, cancelling the caller cannot stop the
    write: the caller waits for that commit and returns what it decided, so what it saw is
    what the journal says."""
    for wid in ("r1", "r2"):
        _create(store, wid, "w1")
    gate, blocker = held(store)
    inside, go_on = threading.Event(), threading.Event()

    def slow(_conn: Any) -> bool:  # a write in the same batch as r1's: holds it open
        inside.set()
        return go_on.wait(30)

    slow_write = Write("r2", slow, lambda: False, wrote=lambda _decided: False)

    async def main() -> bool:
        waiting = asyncio.ensure_future(store.append_async("r1", _step(1), owner="w1"))
        await asyncio.to_thread(queued, store, 1)
        other = asyncio.ensure_future(asyncio.to_thread(store._batched, slow_write))
        await asyncio.to_thread(queued, store, 2)
        gate.set()  # the next batch takes both writes; r2's holds it open
        await asyncio.to_thread(inside.wait, 30)
        waiting.cancel()
        await asyncio.sleep(0.05)
        assert not waiting.done()  # it waits for the batch
        go_on.set()
        result = await waiting
        await other
        return bool(result)

    try:
        assert asyncio.run(asyncio.wait_for(main(), 30)) is True
    finally:
        gate.set()
        go_on.set()
        blocker.join(timeout=30)
    assert [r.seq for r in store.replay_index("r1")] == [1]
