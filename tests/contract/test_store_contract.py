"""The store contract: each verb is atomic and fenced by its precondition, on every backend.

Every verb of the ``Store`` protocol has a test here or in another ``test_*.py`` of this folder
(``test_every_protocol_verb_has_a_contract_test`` checks it), and every verb that takes a lease
``owner`` refuses a stale one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import json
import re
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stalwart import NotDurableWarning
from stalwart._errors import InvalidOperation, StoreError
from stalwart._model import ErrorRecord, Usage
from stalwart._store import Entry, Store, open_store
from stalwart._store.base import (
    ApprovalRow,
    ChildRedrive,
    CompensationRow,
    ForkCandidate,
    LeaseAsk,
    QueueLimits,
    ReplayState,
    ScheduledRun,
    WaitDecision,
    WorkerRow,
)
from stalwart.testing import execute_sql

OLD_TREES = Path(__file__).parents[1] / "unit" / "data" / "tree_with_32_byte_keys.json"

_CANCELLED = ErrorRecord("WorkflowCancelled")  # what a cancel records


def _create(
    store: Store,
    wid: str = "r1",
    owner: str | None = "w1",
    now: float = 100.0,
    *,
    name: str = "agent",
    queue: str = "default",
    priority: int = 0,
) -> bool:
    return store.create_run(
        workflow_id=wid,
        name=name,
        status="running" if owner else "pending",
        queue=queue,
        priority=priority,
        input=b"Jnull",
        now=now,
        owner=owner,
        lease_until=now + 30,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _step(
    seq: int,
    output: bytes | None = b"J1",
    *,
    kind: str = "step",
    status: str = "completed",
    input: bytes | None = None,
    compensable: bool = False,
) -> Entry:
    return Entry(
        kind=kind,
        name="s",
        status=status,
        seq=seq,
        position=str(seq - 1),
        attempt=1,
        input=input,
        output=output,
        compensable=compensable,
    )


def _note(name: str, **fields: Any) -> Entry:
    return Entry(kind="operator", name=name, status="completed", **fields)


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


def test_finish_run_async_ends_a_held_run_as_finish_run_does(store: Store) -> None:
    _create(store)
    big = b"J" + b'"' + b"x" * 5000 + b'"'  # stored apart: the write takes the run's lock first
    done = Entry(kind="run", name="finished", status="completed")
    ended = store.finish_run_async(
        "r1",
        owner="w1",
        status="completed",
        output=big,
        error=None,
        now=5,
        entry=done,
        charged=[_step(1)],
        ties=False,
    )
    assert asyncio.run(ended)
    row = store.get_run("r1")
    assert row is not None and (row.status, row.lease_owner) == ("completed", None)
    assert row.output is not None and store.load_payload(row.output) == big
    assert [r.name for r in store.journal("r1")] == ["started", "s", "finished"]


def test_payloads_inline_or_by_digest(store: Store) -> None:
    _create(store)
    big = b"J" + b'"' + b"x" * 5000 + b'"'
    store.append("r1", _step(1, big), owner="w1")
    store.append("r1", _step(2, big), owner="w1")
    store.append("r1", _step(3, b"J2"), owner="w1")
    index = store.replay_index("r1")
    # A reference (or a payload's small tree root), the same for the same payload.
    assert index[0].output == index[1].output and index[2].output == b"J2"
    assert len(index[0].output or b"") <= 100
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


def test_run_counts_count_each_status_and_queue(store: Store) -> None:
    assert store.run_counts() == []
    _create(store, "r1", owner=None)
    _create(store, "r2", owner=None)
    _create(store, "r3", owner=None, queue="llm")
    _create(store, "r4", owner="w")
    assert sorted((c.status, c.queue, c.runs) for c in store.run_counts()) == [
        ("pending", "default", 2),
        ("pending", "llm", 1),
        ("running", "default", 1),
    ]
    store.suspend_run("r4", owner="w", wake_at=5.0, waiting_for=None, now=1.0)
    _create(store, "r5", owner="w", queue="llm")
    assert sorted((c.status, c.queue, c.runs) for c in store.queue_counts()) == [
        ("pending", "default", 2),
        ("pending", "llm", 1),
        ("running", "llm", 1),
    ]  # the suspended run is not counted: the queues page shows pending and running ones
    _create(store, "r6", owner=None, queue="batch")
    assert store.cancel_run("r6", now=2.0, error=_CANCELLED, entry=_note("cancel")) == "cancelled"
    assert store.run_queues() == ["batch", "default", "llm"]  # a queue whose runs all ended too


def test_a_run_keeps_the_trace_context_it_was_created_with(store: Store) -> None:
    carrier = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    store.create_run(
        workflow_id="traced",
        name="agent",
        status="pending",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=1.0,
        owner=None,
        lease_until=None,
        entry=Entry(kind="run", name="started", status="completed"),
        trace_context=carrier,
    )
    _create(store, "plain", owner=None)
    traced, plain = store.get_run("traced"), store.get_run("plain")
    assert traced is not None and traced.trace_context == carrier
    assert plain is not None and plain.trace_context is None


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


def test_release_memory_keeps_every_row_readable(store: Store) -> None:
    """What an idle worker calls after a burst: caches go, nothing stored does."""
    _create(store, "kept")
    store.release_memory()
    row = store.get_run("kept")
    assert row is not None and row.workflow_id == "kept"
    _create(store, "after", owner=None)
    assert store.get_run("after") is not None


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


# -- the store itself ------------------------------------------------------------------------


def test_clock_offset_is_zero_on_this_machine_and_small_on_a_server(store: Store) -> None:
    offset = store.clock_offset()
    if store.url.startswith(("memory:", "sqlite:")):
        assert offset == 0.0
    else:
        assert offset is not None and abs(offset) < 1.0  # the server runs on this machine


def test_reserve_connections_lets_that_many_threads_use_the_store_at_once(store: Store) -> None:
    _create(store)
    store.reserve_connections(12)
    seen: list[bool] = []
    threads = [
        threading.Thread(target=lambda: seen.append(store.get_run("r1") is not None))
        for _ in range(12)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == [True] * 12


def test_close_releases_the_store(store_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotDurableWarning)
        closing = open_store(store_url)
    closing.close()
    with pytest.raises(StoreError):
        closing.get_run("r1")


# -- claiming --------------------------------------------------------------------------------


def test_claimable_is_one_definition(store: Store) -> None:
    _create(store, "held")  # leased by w1 until 130
    _create(store, "new", owner=None)
    _create(store, "sleeper")
    assert store.suspend_run("sleeper", owner="w1", wake_at=150.0, waiting_for=None, now=101.0)
    _create(store, "waiter")
    assert store.suspend_run("waiter", owner="w1", wake_at=None, waiting_for="event:go", now=101)
    _create(store, "done")
    done = Entry(kind="run", name="finished", status="completed")
    store.finish_run(
        "done", owner="w1", status="completed", output=None, error=None, now=102, entry=done
    )
    assert not store.claimable("held", now=120.0)  # a live lease
    assert store.claimable("held", now=120.0, holder_gone=True)  # its holder is gone
    assert store.claimable("held", now=131.0)  # the lease lapsed
    assert store.claimable("new", now=0.0)
    assert not store.claimable("sleeper", now=149.0)
    assert store.claimable("sleeper", now=150.0)
    assert not store.claimable("waiter", now=1e12)
    assert not store.claimable("done", now=1e12, holder_gone=True)
    assert not store.claimable("missing", now=1e12)
    # The candidates are exactly the claimable runs, takeovers first, then wake-ups, then new.
    candidates = store.claim_candidates(names=["agent"], queues=["default"], now=160.0, limit=10)
    assert [(c.workflow_id, c.status, c.lease_owner) for c in candidates] == [
        ("held", "running", "w1"),
        ("sleeper", "suspended", None),
        ("new", "pending", None),
    ]
    # each is the whole run row, as get_run reads it: a worker starts it without reading it again
    assert candidates == [store.get_run(c.workflow_id) for c in candidates]
    for wid in ("held", "new", "sleeper", "waiter", "done"):
        listed = any(c.workflow_id == wid for c in candidates)
        assert store.claimable(wid, now=160.0) == listed, wid


def test_claim_candidates_filter_and_order_by_priority_then_age(store: Store) -> None:
    _create(store, "old", owner=None, now=1.0)
    _create(store, "urgent", owner=None, now=2.0, priority=5)
    _create(store, "young", owner=None, now=3.0)
    _create(store, "other-name", owner=None, name="other")
    _create(store, "other-queue", owner=None, queue="q")
    found = store.claim_candidates(names=["agent"], queues=["default"], now=10.0, limit=10)
    assert [c.workflow_id for c in found] == ["urgent", "old", "young"]
    assert len(store.claim_candidates(names=["agent"], queues=["default"], now=10, limit=2)) == 2
    assert [
        c.workflow_id
        for c in store.claim_candidates(names=["agent", "other"], queues=["q"], now=10, limit=10)
    ] == ["other-queue"]


def test_held_on_host_lists_running_runs_of_this_hosts_processes(store: Store) -> None:
    _create(store, "mine", owner="hostA/1/x#1")
    _create(store, "theirs", owner="hostB/2/y#1")
    _create(store, "other-name", owner="hostA/3/z#1", name="other")
    _create(store, "pending", owner=None)
    held = store.held_on_host(host_prefix="hostA/", names=["agent"])
    assert held == [store.get_run("mine")]  # each the whole row, as get_run reads it
    assert held[0].lease_owner == "hostA/1/x#1"
    assert store.held_on_host(host_prefix="hostC/", names=["agent", "other"]) == []


def test_next_wake_is_the_earliest_timer_of_these_workflows_and_queues(store: Store) -> None:
    assert store.next_wake(names=["agent"], queues=["default"]) is None
    for wid, wake_at, queue in (("a", 150.0, "default"), ("b", 140.0, "default"), ("c", 1.0, "q")):
        _create(store, wid, queue=queue)
        assert store.suspend_run(wid, owner="w1", wake_at=wake_at, waiting_for=None, now=101)
    _create(store, "event")
    assert store.suspend_run("event", owner="w1", wake_at=None, waiting_for="event:x", now=101)
    assert store.next_wake(names=["agent"], queues=["default"]) == pytest.approx(140.0)
    assert store.next_wake(names=["agent"], queues=["q"]) == pytest.approx(1.0)
    assert store.next_wake(names=["other"], queues=["default", "q"]) is None


def test_cancel_requested_for_lists_the_held_runs_asked_to_cancel(store: Store) -> None:
    _create(store, "r1", owner="host/1/p#1")
    _create(store, "r2", owner="host/1/p#2")
    _create(store, "r3", owner="host/2/q#1")
    assert store.cancel_requested_for("host/1/p#") == set()
    for wid in ("r1", "r3"):
        assert (
            store.cancel_run(wid, now=110, error=_CANCELLED, entry=_note("cancel")) == "requested"
        )
    assert store.cancel_requested_for("host/1/p#") == {"r1"}
    assert store.cancel_requested_for("host/") == {"r1", "r3"}
    assert store.renew_lease("r1", owner="host/1/p#1", lease_until=200) is True  # and told


# -- holding a lease -------------------------------------------------------------------------


def test_take_lease_journals_its_entry_and_returns_a_typed_claim(store: Store) -> None:
    _create(store, owner=None)
    resumed = Entry(kind="run", name="resumed", status="completed")
    claim = store.take_lease(
        "r1", owner="w2", expected_owner=None, now=101, lease_until=131, entry=resumed
    )
    assert (claim.taken, claim.recoveries) == (True, 0)
    assert [r.name for r in store.journal("r1")] == ["started", "resumed"]
    row = store.get_run("r1")
    assert row is not None and (row.status, row.lease_owner, row.lease_expires_at) == (
        "running",
        "w2",
        131,
    )


def test_record_progress_extends_the_lease_of_its_holder(store: Store) -> None:
    _create(store)
    assert store.record_progress("r1", owner="w1", progress=b"J7", now=110, lease_until=190)
    row = store.get_run("r1")
    assert row is not None and (row.lease_expires_at, row.updated_at) == (190, 110)


def test_release_run_gives_a_held_run_back_as_pending(store: Store) -> None:
    _create(store)
    assert store.release_run("r1", owner="w1", now=110)
    row = store.get_run("r1")
    assert row is not None and (row.status, row.lease_owner) == ("pending", None)
    assert store.claimable("r1", now=110)
    assert not store.release_run("r1", owner="w1", now=111)  # it is no longer held


# -- the journal -----------------------------------------------------------------------------


def test_append_many_is_all_or_nothing_under_the_lease(store: Store) -> None:
    _create(store)
    assert store.append_many("r1", [_step(1), _step(2)], owner="w1")
    assert [r.seq for r in store.replay_index("r1")] == [1, 2]
    assert store.append_many("r1", [], owner="w1")


def test_journal_after_an_id_reads_only_the_rows_after_it_and_journal_size_counts(
    store: Store,
) -> None:
    _create(store)
    _create(store, "other")
    big = b'J"' + b"z" * 600 + b'"'  # kept apart from its row: resolved in the tail too
    for seq in (1, 2, 3):
        assert store.append("r1", _step(seq, big if seq == 3 else b"J1"), owner="w1")
        assert store.append("other", _note("noise"), owner=None)
    whole = store.journal("r1")
    assert [r.seq for r in whole] == [None, 1, 2, 3]
    assert store.journal("r1", after=whole[1].id) == whole[2:]
    assert store.journal("r1", after=whole[-1].id) == []
    assert store.journal("r1", after=0) == whole
    assert store.journal("r1", after=whole[1].id)[-1].output == big
    assert store.journal_size("r1") == len(whole) == 4
    assert store.journal_size("other") == 4 and store.journal_size("none") == 0
    assert store.journal("none", after=0) == []


def test_journal_with_a_limit_reads_at_most_that_many_rows_after_an_id(store: Store) -> None:
    _create(store)
    _create(store, "other")
    for seq in (1, 2, 3):
        assert store.append("r1", _step(seq, b"J1"), owner="w1")
        assert store.append("other", _note("noise"), owner=None)
    whole = store.journal("r1")
    assert store.journal("r1", limit=2) == whole[:2]
    assert store.journal("r1", after=whole[0].id, limit=2) == whole[1:3]
    assert store.journal("r1", after=whole[2].id, limit=5) == whole[3:]
    assert store.journal("r1", after=whole[-1].id, limit=1) == []
    assert store.journal("r1", limit=100) == whole


def test_mark_retry_notes_the_retry_on_the_run(store: Store) -> None:
    _create(store)
    assert store.mark_retry("r1", owner="w1", marker="3:2")
    row = store.get_run("r1")
    assert row is not None and row.retrying == "3:2"


def test_compensation_plan_lists_compensable_steps_and_compensations(store: Store) -> None:
    _create(store)
    big = b'J"' + b"y" * 600 + b'"'
    store.append("r1", _step(1, b"J1", input=big, compensable=True), owner="w1")
    store.append("r1", _step(2), owner="w1")  # not compensable
    store.append("r1", _step(3, status="compensated"), owner="w1")
    store.append("r1", _step(1, None, kind="compensation", status="failed"), owner="w1")
    plan = store.compensation_plan("r1")
    assert all(isinstance(row, CompensationRow) for row in plan)
    assert [(r.seq, r.kind, r.status) for r in plan] == [
        (1, "step", "completed"),
        (3, "step", "compensated"),
        (1, "compensation", "failed"),
    ]
    assert plan[0].input == big and plan[0].output == b"J1"  # payloads resolved
    assert plan[0].position == "0" and plan[0].name == "s" and plan[0].attempt == 1
    assert plan[0].id < plan[1].id < plan[2].id and plan[0].error is None


def test_rollback_in_progress_until_a_retry_comes_after_it(store: Store) -> None:
    _create(store)
    assert store.rollback_in_progress("r1") is None
    rolling = Entry(kind="run", name="rolling_back", status="completed", output=b'J"failed"')
    assert store.append("r1", rolling, owner="w1")
    assert store.rollback_in_progress("r1") == b'J"failed"'
    assert store.append("r1", _note("retry"), owner=None)
    assert store.rollback_in_progress("r1") is None


def test_take_leases_claims_together_and_each_decides_for_itself(store: Store) -> None:
    _create(store, "a", owner=None)
    _create(store, "b", owner=None)
    _create(store, "c", owner="w0")  # held, its lease current: refused
    _create(store, "d", owner=None)
    assert store.append("a", _step(1), owner=None)
    resumed = Entry(kind="run", name="resumed", status="completed")

    def ask(wid: str, *, entry: Entry | None = resumed) -> LeaseAsk:
        return LeaseAsk(wid, "w1", None, 110.0, 140.0, entry, replay=True)

    claims = store.take_leases([ask("a"), ask("b"), ask("c"), ask("d", entry=None)])
    assert [getattr(claim, "taken", None) for claim in claims] == [True, True, False, True]
    for wid in ("a", "b", "d"):
        row = store.get_run(wid)
        assert row is not None and (row.status, row.lease_owner) == ("running", "w1")
    held = store.get_run("c")
    assert held is not None and held.lease_owner == "w0"
    first = claims[0]
    assert not isinstance(first, Exception)
    if first.replay is not None:  # read with the claim where the store could
        assert first.replay == store.replay_state("a")
        assert [row.seq for row in first.replay.index] == [1]
    assert [r.name for r in store.journal("b")] == ["started", "resumed"]
    assert [r.name for r in store.journal("d")] == ["started"]


def test_take_leases_recovers_runs_together_with_their_replay_state(store: Store) -> None:
    for wid in ("a", "b"):
        _create(store, wid, owner="w0")  # its lease lapses at 130
        assert store.append(wid, _step(1), owner="w0")
    resumed = Entry(kind="run", name="resumed", status="completed")
    asks = [
        LeaseAsk(wid, "w1", "w0", 200.0, 230.0, resumed, recovery=True, replay=True)
        for wid in ("a", "b")
    ]
    claims = store.take_leases(asks)
    for wid, claim in zip(("a", "b"), claims, strict=True):
        assert not isinstance(claim, Exception) and claim.taken and claim.recoveries == 1
        if claim.replay is not None:  # read with the claim where the store could
            assert claim.replay == store.replay_state(wid)
            assert [row.seq for row in claim.replay.index] == [1]


def test_replay_state_is_the_index_and_the_rollback_read_together(store: Store) -> None:
    _create(store)
    assert store.replay_state("r1") == ReplayState([], None)
    assert store.append("r1", _step(1), owner="w1")
    rolling = Entry(kind="run", name="rolling_back", status="completed", output=b"x" * 5000)
    assert store.append("r1", rolling, owner="w1")
    state = store.replay_state("r1")
    assert state == ReplayState(store.replay_index("r1"), b"x" * 5000)  # a stored payload too
    assert [row.seq for row in state.index] == [1]
    assert store.append("r1", _note("retry"), owner=None)
    assert store.append("r1", _step(2), owner="w1")
    assert store.replay_state("r1") == ReplayState(store.replay_index("r1"), None)
    assert [row.seq for row in store.replay_index("r1")] == [1, 2]


# -- waits, events and approvals -------------------------------------------------------------


def _wait(seq: int = 1, name: str = "go") -> Entry:
    return Entry(kind="event", name=name, status="scheduled", seq=seq, position=str(seq - 1))


def _resolved(seq: int = 1, name: str = "go") -> Entry:
    return Entry(kind="event", name=name, status="completed", seq=seq, position=str(seq - 1))


def _ask(approval_id: str = "a1", now: float = 100.0) -> dict[str, Any]:
    return {
        "approval_id": approval_id,
        "subject": "ship it?",
        "details": b"J{}",
        "now": now,
        "expires_at": None,
    }


def test_suspend_run_waits_unless_what_it_waits_for_arrived(store: Store) -> None:
    _create(store)
    note = Entry(kind="run", name="suspended", status="completed")
    assert store.suspend_run(
        "r1", owner="w1", wake_at=None, waiting_for="event:go", now=101, entry=note
    )
    row = store.get_run("r1")
    assert row is not None and (row.status, row.lease_owner, row.waiting_for) == (
        "suspended",
        None,
        "event:go",
    )
    assert store.journal("r1")[-1].name == "suspended"
    _create(store, "r2")
    assert store.deliver_event(
        "r2", name="go", payload=None, dedup_key=None, now=102, entry=_note("event")
    )
    assert not store.suspend_run("r2", owner="w1", wake_at=None, waiting_for="event:go", now=103)
    row = store.get_run("r2")
    assert row is not None and (row.status, row.lease_owner) == ("running", "w1")


def test_open_wait_journals_the_wait_and_its_approval_request(store: Store) -> None:
    _create(store)
    assert store.open_wait("r1", _wait(), owner="w1")
    assert [(r.seq, r.status) for r in store.replay_index("r1")] == [(1, "scheduled")]
    assert store.open_wait("r1", _wait(2, "approval"), owner="w1", approval=_ask())
    request = store.get_approval("r1", "a1")
    assert request == ApprovalRow(
        "r1", "a1", "ship it?", b"J{}", 100.0, None, None, None, None, None
    )
    assert store.get_approval("r1", "other") is None


def test_resolve_wait_takes_the_oldest_event_sent_in_time(store: Store) -> None:
    _create(store)
    assert store.open_wait("r1", _wait(), owner="w1")
    assert store.resolve_wait("r1", _resolved(), owner="w1", event_name="go") == WaitDecision(
        "none"
    )
    for i, now in enumerate((110.0, 120.0)):
        payload = b'J"' + str(i).encode() * 300 + b'"'  # stored apart from the event row
        assert store.deliver_event(
            "r1", name="go", payload=payload, dedup_key=None, now=now, entry=_note("event")
        )
    late = store.resolve_wait("r1", _resolved(), owner="w1", event_name="go", until=100.0)
    assert late.winner == "none"  # both were sent after the wait's timeout
    decision = store.resolve_wait("r1", _resolved(), owner="w1", event_name="go", until=115.0)
    assert decision == WaitDecision("event", b'J"' + b"0" * 300 + b'"')
    assert store.replay_index("r1")[-1].status == "completed"
    again = store.resolve_wait("r1", _resolved(), owner="w1", event_name="go")
    assert again.winner == "lost"  # seq 1 is decided already
    store.open_wait("r1", _wait(2), owner="w1")
    second = store.resolve_wait("r1", _resolved(2), owner="w1", event_name="go")
    assert second == WaitDecision("event", b'J"' + b"1" * 300 + b'"')  # the first was consumed


def test_resolve_wait_takes_a_decision_then_the_timer(store: Store) -> None:
    _create(store)
    assert store.open_wait("r1", _wait(1, "approval"), owner="w1", approval=_ask("a1"))
    assert store.decide_approval(
        "r1", "a1", approved=True, by="alice", reason="fine", now=110, entry=_note("approve")
    )
    decision = store.resolve_wait(
        "r1",
        _resolved(1, "approval"),
        owner="w1",
        approval_id="a1",
        encode_decision=lambda row: f"J{row.approved}:{row.by}".encode(),
    )
    assert decision == WaitDecision("approval", b"J1:alice")
    assert store.open_wait("r1", _wait(2, "approval"), owner="w1", approval=_ask("a2"))
    timer = store.resolve_wait(
        "r1", _resolved(2, "approval"), owner="w1", approval_id="a2", time_out=True, now=200.0
    )
    assert timer == WaitDecision("timer")
    expired = store.get_approval("r1", "a2")
    assert expired is not None and (expired.decided_at, expired.reason) == (200.0, "expired")


def test_deliver_event_deduplicates_and_wakes_the_waiting_run(store: Store) -> None:
    with pytest.raises(KeyError):
        store.deliver_event(
            "missing", name="go", payload=None, dedup_key=None, now=1, entry=_note("event")
        )
    _create(store)
    assert store.suspend_run("r1", owner="w1", wake_at=None, waiting_for="event:go", now=101)
    assert not store.claimable("r1", now=150)
    assert store.deliver_event(
        "r1", name="go", payload=b"J1", dedup_key="k", now=150, entry=_note("event")
    )
    assert not store.deliver_event(
        "r1", name="go", payload=b"J2", dedup_key="k", now=151, entry=_note("event")
    )
    assert [r.name for r in store.journal("r1")] == ["started", "event"]
    row = store.get_run("r1")
    assert row is not None and row.wake_at == 150
    assert store.claimable("r1", now=150)


def test_deliver_event_refuses_a_completed_run_but_not_a_failed_one(store: Store) -> None:
    for wid, status in (("done", "completed"), ("dead", "failed")):
        _create(store, wid)
        assert store.deliver_event(
            wid, name="go", payload=None, dedup_key="k1", now=4, entry=_note("event")
        )
        done = Entry(kind="run", name="finished", status=status)
        assert store.finish_run(
            wid, owner="w1", status=status, output=None, error=None, now=5, entry=done
        )
    with pytest.raises(InvalidOperation, match="is completed"):
        store.deliver_event(
            "done", name="go", payload=None, dedup_key=None, now=6, entry=_note("event")
        )
    assert not store.deliver_event(  # a late repeat of a delivered event is a duplicate
        "done", name="go", payload=None, dedup_key="k1", now=6, entry=_note("event")
    )
    assert [r.name for r in store.journal("done")] == ["started", "event", "finished"]
    assert store.deliver_event(  # a redrive may still wait for it
        "dead", name="go", payload=None, dedup_key=None, now=6, entry=_note("event")
    )


def test_step_usage_reads_the_attempts_of_steps_only(store: Store) -> None:
    _create(store)
    # the store encodes the entry's values where it writes the row, as every release has
    spent = '{"in": 10, "out": 2}'
    interrupted = '{"type": "AttemptInterrupted", "message": "attempt 1 was interrupted"}'
    failure = ErrorRecord("AttemptInterrupted", "attempt 1 was interrupted")
    for entry in (
        dataclasses.replace(_step(1), usage=Usage(10, 2, attempts=1)),
        dataclasses.replace(_step(2, status="failed"), usage=None, error=failure),
        _step(3, status="in_doubt"),  # it marks an interrupted attempt: its name is kept
        _step(4, kind="sleep"),
        _step(5, status="scheduled"),
        dataclasses.replace(_step(6), usage=Usage(3, 4, 0.5, 1), model="gpt-x"),
    ):
        assert store.append("r1", entry, owner="w1")
    rows = store.step_usage("r1")
    assert [(u.seq, u.status, u.usage, u.error) for u in rows] == [
        (1, "completed", spent, None),
        (2, "failed", None, interrupted),
        (3, "in_doubt", None, None),
        (6, "completed", '{"in": 3, "out": 4, "cost": 0.5, "model": "gpt-x"}', None),
    ]
    assert {u.name for u in rows} == {_step(1).name}


def test_run_spend_keeps_the_totals_step_usage_adds_up(store: Store) -> None:
    """The running totals count what the journal's attempts used by the rules ``app.usage``
    applied to ``step_usage``, in the transaction of each append, whatever writes it."""
    assert store.run_spend("r1") is None  # no run, no attempt
    _create(store)
    assert store.run_spend("r1") is None  # a run with no attempt yet
    failure = ErrorRecord("AttemptInterrupted", "attempt 1 was interrupted")
    for entry in (
        dataclasses.replace(_step(1), usage=Usage(10, 2, attempts=1)),
        dataclasses.replace(_step(2, status="failed"), usage=None, error=failure),
        _step(3, status="in_doubt"),  # an interrupted attempt: its usage is lost
        _step(4, kind="sleep"),  # no attempt
        _step(5, status="scheduled"),  # no attempt
        dataclasses.replace(_step(6), attempt=0),  # a retry's marker: no attempt
        dataclasses.replace(_step(7), usage=Usage(3, 4, 0.5, 1), model="gpt-x"),
        dataclasses.replace(_step(8, status="in_doubt"), usage=Usage(1, 1, 0.25, 1)),
        _step(8, status="failed"),  # the attempt left in doubt ends: it counts here
        _step(9, kind="compensation"),
    ):
        assert store.append("r1", entry, owner="w1")
    spent = store.run_spend("r1")
    assert spent is not None and spent.since_start
    assert (spent.input_tokens, spent.output_tokens, spent.cost, spent.attempts) == (
        14,
        7,
        0.75,
        5,
    )
    assert spent.partial  # step "s" recorded usage, and a crash lost an attempt's
    assert spent.budget_input is None
    detail = b'J{"from_status":"needs_attention","budget":{"max_steps":9}}'
    assert store.append("r1", _note("retry", input=detail), owner=None)
    assert store.append("r1", _note("retry", input=None), owner=None)  # gives no budget
    spent = store.run_spend("r1")
    assert spent is not None and spent.budget_input == detail


def test_calls_are_counted_by_step_and_stored_input_once_asked(store: Store) -> None:
    """``count_calls`` copies the calls journaled so far and has every later one counted: one
    per position (a retried call counts once), by step name and stored input."""
    _create(store)
    same, other = b"J[1]", b"J[2]"

    def call(seq: int, attempt: int = 1, status: str = "completed", input: bytes = same) -> Entry:
        entry = dataclasses.replace(_step(seq, status=status, input=input), attempt=attempt)
        return entry

    assert store.append("r1", call(1), owner="w1")
    assert store.append("r1", call(2, status="failed"), owner="w1")
    assert store.run_calls("r1", "s", same) == 0  # not counted yet
    store.count_calls("r1")
    store.count_calls("r1")  # idempotent
    spent = store.run_spend("r1")
    assert spent is not None and spent.counts_calls
    assert store.run_calls("r1", "s", same) == 2
    for entry in (
        call(2, attempt=2),  # the same call retried: still one call
        call(3, status="scheduled"),  # not an outcome
        call(4, input=other),
        call(5),
        dataclasses.replace(call(6), attempt=0),  # a retry's marker: no call
    ):
        assert store.append("r1", entry, owner="w1")
    assert store.run_calls("r1", "s", same) == 3
    assert store.run_calls("r1", "s", other) == 1
    assert store.run_calls("r1", "t", same) == 0


def test_run_spend_leaves_out_what_is_not_partial(store: Store) -> None:
    """An attempt a crash interrupted after its usage was kept in doubt is not a loss."""
    _create(store)
    failure = ErrorRecord("AttemptInterrupted", "attempt 1 was interrupted")
    for entry in (
        dataclasses.replace(_step(1, status="in_doubt"), usage=Usage(5, 5, attempts=1)),
        dataclasses.replace(_step(1, status="failed"), usage=None, error=failure),
        dataclasses.replace(_step(2), usage=Usage(1, 1, attempts=1)),
    ):
        assert store.append("r1", entry, owner="w1")
    spent = store.run_spend("r1")
    assert spent is not None and not spent.partial
    assert (spent.input_tokens, spent.attempts) == (6, 2)


def test_a_step_input_kept_in_the_older_tree_format_still_reads(store: Store) -> None:
    """Rows an earlier format wrote (a tree of 32-byte keys and pieces deflated alone, kept
    verbatim in ``tests/unit/data``) read back through the store as they were written."""
    old = json.loads(OLD_TREES.read_text("utf-8"))
    _create(store)
    for digest, data in old["rows"].items():
        put = "INSERT INTO payloads (digest, data) VALUES (:digest, :data)"
        execute_sql(store, put, {"digest": bytes.fromhex(digest), "data": bytes.fromhex(data)})
    for seq, (turns, column) in enumerate(old["columns"].items(), start=1):
        row = (
            "INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, "
            "input, output) VALUES ('r1', :seq, :position, 'step', 's', 'completed', 1, "
            ":input, :output)"
        )
        params = {"seq": seq, "position": str(seq), "input": bytes.fromhex(column)}
        execute_sql(store, row, {**params, "output": b"J1"})
        messages = []
        for i in range(int(turns)):
            messages.append({"role": "user", "content": f"question {i}: " + "why? " * 60})
            messages.append({"role": "assistant", "content": f"answer {i}: " + "because. " * 40})
        written = b"J" + json.dumps({"args": [messages], "kwargs": {}}).encode()
        assert store.journal("r1")[-1].input == written


def test_what_an_older_worker_reads_stays_whole_and_a_step_input_is_a_tree(store: Store) -> None:
    """During a rolling deploy an older worker reads step results and (through its callers)
    run results: up to 4 KiB they stay whole under their digest, as every release wrote them.
    A step input, which no older worker decodes, is a tree at any size kept apart."""
    _create(store)
    value = b"J" + json.dumps("x" * 1000).encode()
    step = dataclasses.replace(_step(1, output=value, input=value))
    assert store.append("r1", step, owner="w1")
    done = Entry(kind="run", name="completed", status="completed", output=value)
    assert store.finish_run(
        "r1", owner="w1", status="completed", output=value, error=None, now=5, entry=done
    )
    digest = hashlib.sha256(value).digest()
    query = "SELECT input, output FROM journal WHERE workflow_id = 'r1' AND kind = 'step'"
    ((step_input, step_output),) = execute_sql(store, query)
    (run_output,) = execute_sql(store, "SELECT output FROM runs WHERE workflow_id = 'r1'")[0]
    assert bytes(step_output) == bytes(run_output) == b"H" + digest
    stored = execute_sql(store, "SELECT data FROM payloads WHERE digest = :d", {"d": digest})
    assert [bytes(row[0]) for row in stored] == [value]
    assert bytes(step_input)[:1] == b"U"
    assert store.journal("r1")[1].input == value


def test_approvals_are_listed_oldest_first_and_decided_once(store: Store) -> None:
    for wid, now in (("r1", 100.0), ("r2", 90.0)):
        _create(store, wid)
        assert store.open_wait(wid, _wait(1, "approval"), owner="w1", approval=_ask("a", now))
        assert store.suspend_run(
            wid, owner="w1", wake_at=None, waiting_for="approval:a", now=now + 1
        )
    assert [r.workflow_id for r in store.list_approvals(pending=True)] == ["r2", "r1"]
    assert store.count_pending_approvals() == 2
    assert store.decide_approval(
        "r1", "a", approved=False, by="bob", reason="no", now=120, entry=_note("reject")
    )
    assert not store.decide_approval(
        "r1", "a", approved=True, by="eve", reason=None, now=121, entry=_note("approve")
    )
    decided = store.get_approval("r1", "a")
    assert decided is not None and (decided.approved, decided.by, decided.reason) == (
        0,
        "bob",
        "no",
    )
    assert [r.workflow_id for r in store.list_approvals(pending=True)] == ["r2"]
    assert store.count_pending_approvals() == 1  # what the console's navigation shows
    assert [r.workflow_id for r in store.list_approvals(pending=False)] == ["r2", "r1"]
    assert [r.approval_id for r in store.list_approvals(pending=False, workflow_id="r1")] == ["a"]
    of_both = store.approvals_of(["r1", "r2", "r1", "nobody"])  # what a page of runs waits on
    assert sorted((r.workflow_id, r.approval_id, r.decided_at) for r in of_both) == [
        ("r1", "a", 120),
        ("r2", "a", None),
    ]
    assert store.approvals_of([]) == []
    assert store.claimable("r1", now=120)  # the decision woke its run
    assert not store.claimable("r2", now=120)


def test_finishing_a_run_closes_its_pending_approvals(store: Store) -> None:
    _create(store)
    assert store.open_wait("r1", _wait(1, "approval"), owner="w1", approval=_ask())
    done = Entry(kind="run", name="finished", status="completed")
    assert store.finish_run(
        "r1", owner="w1", status="failed", output=None, error='{"type": "X"}', now=110, entry=done
    )
    assert store.list_approvals(pending=True) == []
    assert store.count_pending_approvals() == 0
    row = store.get_run("r1")
    assert row is not None and (row.status, row.error) == ("failed", '{"type": "X"}')


# -- operator actions ------------------------------------------------------------------------


def _attention(store: Store, wid: str = "r1", *, compensable: bool = False) -> None:
    _create(store, wid)
    if compensable:
        assert store.append(wid, _step(1, compensable=True), owner="w1")
    done = Entry(kind="run", name="finished", status="completed")
    assert store.finish_run(
        wid, owner="w1", status="needs_attention", output=None, error="{}", now=110, entry=done
    )


def test_cancel_run_cancels_a_waiting_run_or_asks_its_holder(store: Store) -> None:
    _create(store, "waiting", owner=None)
    assert (
        store.cancel_run("waiting", now=110, error=_CANCELLED, entry=_note("cancel")) == "cancelled"
    )
    row = store.get_run("waiting")
    assert row is not None and (row.status, row.cancel_requested) == ("cancelled", 1)
    assert (
        store.cancel_run("waiting", now=111, error=_CANCELLED, entry=_note("cancel")) == "finished"
    )
    _create(store, "held")
    assert store.cancel_run("held", now=110, error=_CANCELLED, entry=_note("cancel")) == "requested"
    row = store.get_run("held")
    assert row is not None and (row.status, row.cancel_requested) == ("running", 1)
    _attention(store, "undo", compensable=True)  # its compensations must run first
    assert store.cancel_run("undo", now=120, error=_CANCELLED, entry=_note("cancel")) == "requested"
    row = store.get_run("undo")
    assert row is not None and (row.status, row.cancel_requested) == ("pending", 1)
    assert [r.name for r in store.journal("undo")][-1] == "cancel"


def test_redrive_makes_a_failed_or_attention_run_pending_again(store: Store) -> None:
    _attention(store)
    reset = [_note("reset"), _note("retry")]
    assert store.redrive("r1", now=120, entries=reset)
    row = store.get_run("r1")
    assert row is not None and (row.status, row.error, row.lease_owner) == ("pending", None, None)
    assert [r.name for r in store.journal("r1")][-2:] == ["reset", "retry"]
    assert not store.redrive("r1", now=121, entries=[_note("retry")])  # pending: nothing to do
    assert [r.name for r in store.journal("r1")] == ["started", "finished", "reset", "retry"]


def test_fork_run_reuses_the_chosen_rows_of_its_source(store: Store) -> None:
    _create(store)
    for seq in (1, 2, 3):
        assert store.append("r1", _step(seq, f"J{seq}".encode()), owner="w1")
    store.append("r1", _step(1, None, kind="compensation"), owner="w1")  # not a candidate
    candidates = store.fork_candidates("r1")
    assert [type(c) for c in candidates] == [ForkCandidate] * 3
    assert [(c.seq, c.position, c.kind, c.status, c.compensable) for c in candidates] == [
        (1, "0", "step", "completed", 0),
        (2, "1", "step", "completed", 0),
        (3, "2", "step", "completed", 0),
    ]
    reuse = [c.id for c in candidates[:2]]
    started = Entry(kind="run", name="started", status="completed")

    def fork(new_id: str) -> bool:
        return store.fork_run(
            "r1",
            new_id=new_id,
            name="agent",
            queue="default",
            input=b"Jnull",
            now=130,
            reuse=reuse,
            started=started,
            by="alice",
            notes=_note("fork"),
        )

    assert fork("f1")
    row = store.get_run("f1")
    assert row is not None and (row.status, row.lease_owner) == ("pending", None)
    assert [(r.seq, r.status, r.output) for r in store.replay_index("f1")] == [
        (1, "reused", b"J1"),
        (2, "reused", b"J2"),
    ]
    assert store.journal("r1")[-1].name == "fork"
    assert not fork("f1")  # the id is taken
    assert not fork("r1")


# -- what operators read ----------------------------------------------------------------------


def test_runs_are_counted_and_paged_on_creation_time_and_id(store: Store) -> None:
    for wid in ("a", "b", "c"):
        _create(store, wid, owner=None, now=100.0, queue="q" if wid != "c" else "default")
    _create(store, "d", owner="w1", now=200.0)
    first = store.list_runs(status=None, name=None, limit=2, before=None)
    assert [r.workflow_id for r in first] == ["d", "c"]
    after = store.list_runs(status=None, name=None, limit=5, before=100.0, before_id="c")
    assert [r.workflow_id for r in after] == ["b", "a"]
    assert store.count_runs(status=None, name=None, queue=None, since=None) == 4
    assert store.count_runs(status="pending", name="agent", queue="q", since=None) == 2
    assert store.count_runs(status=None, name=None, queue=None, since=150.0) == 1
    since = store.list_runs(status=None, name=None, limit=9, before=None, queue="q", since=100.0)
    assert [r.workflow_id for r in since] == ["b", "a"]
    counts = sorted((c.queue, c.status, c.runs) for c in store.run_counts())
    assert counts == [("default", "pending", 1), ("default", "running", 1), ("q", "pending", 2)]


def test_a_holder_publishes_its_current_step(store: Store) -> None:
    _create(store, "r1", owner="w1")
    assert store.publish_step("r1", owner="w1", current='{"name": "llm", "seq": 1}')
    row = store.get_run("r1")
    assert row is not None and row.current_step == '{"name": "llm", "seq": 1}'
    assert store.record_progress("r1", owner="w1", progress=b"J1", now=101.0, lease_until=500)
    row = store.get_run("r1")
    assert row is not None and row.progress == b"J1"


def test_queues_and_workers_are_kept_for_operators(store: Store) -> None:
    store.declare_queue("mail", concurrency=2, rate=None, period=1.0, now=100.0)
    store.declare_queue("mail", concurrency=3, rate=10, period=60.0, now=101.0)
    assert [(q.name, q.concurrency, q.rate, q.period) for q in store.list_queues()] == [
        ("mail", 3, 10, 60.0)
    ]
    store.beat_worker(WorkerRow("w1", "h", 10, '["default"]', 100.0, 100.0, 0))
    store.beat_worker(WorkerRow("w2", "h", 11, '["mail"]', 100.0, 100.0, 0))
    store.beat_worker(WorkerRow("w1", "h", 10, '["default"]', 100.0, 150.0, 2, '["job"]'))
    assert [
        (w.id, w.seen_at, w.running, w.workflows) for w in store.list_workers(stale_before=120.0)
    ] == [("w1", 150.0, 2, '["job"]')]
    store.drop_worker("w1")
    assert store.list_workers(stale_before=0.0) == []


# -- circuit breakers ------------------------------------------------------------------------


def test_a_breaker_opens_at_its_threshold_within_its_window(store: Store) -> None:
    assert store.breaker("llm", now=100.0) is None and store.list_breakers(now=100.0) == []
    args: dict[str, Any] = {"failures": 3, "window": 10.0, "cooldown": 30.0, "probe": None}
    assert not store.breaker_failed("llm", now=100.0, **args)
    assert not store.breaker_failed("llm", now=105.0, **args)
    assert not store.breaker_failed("llm", now=111.0, **args)  # the first fell out of the window
    row = store.breaker("llm", now=111.0)
    assert row is not None and (row.state, row.failures) == ("closed", 2)
    assert store.breaker_failed("llm", now=112.0, **args)
    assert not store.breaker_failed("llm", now=113.0, **args)  # already open
    (row,) = store.list_breakers(now=113.0)
    assert (row.name, row.state, row.opened_at, row.retry_at) == ("llm", "open", 112.0, 142.0)
    assert row.failures == 4


def test_one_probe_closes_or_reopens_a_breaker(store: Store) -> None:
    args: dict[str, Any] = {"failures": 1, "window": 60.0, "cooldown": 30.0}
    assert store.breaker_failed("llm", now=100.0, probe=None, **args)
    assert not store.take_probe("llm", probe="a/1/2", now=129.0, until=159.0)  # cooling down
    assert store.take_probe("llm", probe="a/1/2", now=130.0, until=160.0)
    assert not store.take_probe("llm", probe="b/1/1", now=131.0, until=161.0)  # one at a time
    row = store.breaker("llm", now=131.0)
    assert row is not None and (row.state, row.probe_owner, row.probe_until) == (
        "half_open",
        "a/1/2",
        160.0,
    )
    assert not store.breaker_failed("llm", now=132.0, probe="b/1/1", **args)  # not the probe's
    assert store.breaker("llm", now=132.0).state == "half_open"  # type: ignore[union-attr]
    _create(store, "behind", owner="w1")
    assert store.suspend_run(
        "behind", owner="w1", wake_at=160.0, waiting_for="breaker:llm", now=132.0
    )
    _create(store, "long", owner="w1")
    assert store.suspend_run("long", owner="w1", wake_at=900.0, waiting_for="breaker:llm", now=132)
    assert store.breaker_failed("llm", now=133.0, probe="a/1/2", **args)  # the probe failed
    row = store.breaker("llm", now=133.0)
    assert row is not None and (row.state, row.retry_at) == ("open", 163.0)
    behind = store.get_run("behind")  # it waited for the probe's deadline, 160
    assert behind is not None and behind.wake_at == 160.0  # sooner than the next probe: kept
    long = store.get_run("long")
    assert long is not None and long.wake_at == 163.0  # woken for the next probe instead

    assert store.take_probe("llm", probe="a/1/3", now=163.0, until=193.0)
    assert not store.expire_probe("llm", now=192.0, cooldown=30.0)
    assert store.expire_probe("llm", now=193.0, cooldown=30.0)  # unfinished in time: failed
    assert not store.breaker_succeeded("llm", probe="a/1/3", now=194.0)  # too late to close
    assert store.take_probe("llm", probe="c/1/1", now=223.0, until=253.0)
    _create(store, "waiting", owner="w1")
    assert store.suspend_run(
        "waiting", owner="w1", wake_at=253.0, waiting_for="breaker:llm", now=224.0
    )
    assert store.breaker_succeeded("llm", probe="c/1/1", now=230.0)
    row = store.breaker("llm", now=230.0)
    assert row is not None and (row.state, row.failures, row.retry_at) == ("closed", 0, None)
    woken = store.get_run("waiting")
    assert woken is not None and woken.wake_at == 230.0  # due now, not at its timer


def test_a_failure_that_began_before_the_breaker_closed_is_not_counted(store: Store) -> None:
    """An attempt admitted while the breaker was closed, whose failure is told only after the
    breaker opened and its probe closed it again, is old news: the new window starts empty. An
    attempt begun after the close counts; so does one begun before a first failure."""
    args: dict[str, Any] = {"failures": 2, "window": 60.0, "cooldown": 30.0}
    assert not store.breaker_failed("llm", now=100.0, probe=None, started=10.0, **args)
    assert store.breaker_failed("llm", now=101.0, probe=None, started=100.5, **args)  # opens
    assert store.take_probe("llm", probe="p/1/1", now=131.0, until=161.0)
    assert store.breaker_succeeded("llm", probe="p/1/1", now=132.0)
    assert not store.breaker_failed("llm", now=133.0, probe=None, started=99.0, **args)
    row = store.breaker("llm", now=133.0)
    assert row is not None and (row.state, row.failures) == ("closed", 0)
    assert not store.breaker_failed("llm", now=134.0, probe=None, started=132.5, **args)
    row = store.breaker("llm", now=134.0)
    assert row is not None and (row.state, row.failures) == ("closed", 1)


def test_a_run_does_not_suspend_on_a_breaker_that_closed(store: Store) -> None:
    assert store.breaker_failed("llm", now=100.0, failures=1, window=60, cooldown=1, probe=None)
    assert store.take_probe("llm", probe="p/1/1", now=101.0, until=131.0)
    assert store.breaker_succeeded("llm", probe="p/1/1", now=102.0)
    _create(store, "late", owner="w1")
    assert not store.suspend_run(
        "late", owner="w1", wake_at=131.0, waiting_for="breaker:llm", now=103.0
    )


# -- the shared context ----------------------------------------------------------------------


def _shared_entry(seq: int = 1, name: str = "set plan") -> Entry:
    return Entry(kind="shared", name=name, status="completed", seq=seq, position=str(seq - 1))


def test_shared_writes_are_compare_and_set_on_a_version(store: Store) -> None:
    assert store.read_shared("plan") is None and store.shared_history("plan") == []
    first = store.write_shared("plan", b"J1", if_version=None, by="alice", now=100.0)
    assert (first.held, first.version) == (True, 1)
    assert store.write_shared("plan", b"J2", if_version=0, by="bob", now=101.0).version is None
    assert store.write_shared("plan", b"J2", if_version=1, by="bob", now=102.0).version == 2
    assert store.write_shared("plan", b"J3", if_version=None, by="carol", now=103.0).version == 3
    row = store.read_shared("plan")
    assert row is not None and (row.key, row.version, row.value, row.by, row.at) == (
        "plan",
        3,
        b"J3",
        "carol",
        103.0,
    )
    history = [(r.version, r.value, r.by) for r in store.shared_history("plan")]
    assert history == [(1, b"J1", "alice"), (2, b"J2", "bob"), (3, b"J3", "carol")]
    assert store.read_shared("other") is None  # keys are separate


def test_a_big_shared_value_lives_apart_and_reads_back_whole(store: Store) -> None:
    big = b"J" + b'"' + b"x" * 100_000 + b'"'
    assert store.write_shared("doc", big, if_version=0, by="a", now=1.0).version == 1
    row = store.read_shared("doc")
    assert row is not None and row.value == big
    assert [r.value for r in store.shared_history("doc")] == [big]


def test_a_runs_shared_write_is_journaled_in_its_transaction(store: Store) -> None:
    _create(store)
    answers: list[int | None] = []

    def answer(version: int | None) -> bytes:
        answers.append(version)
        return b"Jnull" if version is None else f"J{version}".encode()

    run = {"workflow_id": "r1", "owner": "w1", "encode_result": answer}
    won = store.write_shared(
        "plan", b"J1", if_version=0, by="r1", now=110.0, entry=_shared_entry(1), **run
    )
    lost = store.write_shared(
        "plan", b"J2", if_version=0, by="r1", now=111.0, entry=_shared_entry(2), **run
    )
    assert (won.held, won.version, lost.held, lost.version) == (True, 1, True, None)
    assert answers == [1, None]
    shared = [(r.seq, r.kind, r.output) for r in store.journal("r1") if r.kind == "shared"]
    assert shared == [(1, "shared", b"J1"), (2, "shared", b"Jnull")]
    assert [r.by for r in store.shared_history("plan")] == ["r1"]


def test_a_stale_owner_writes_nothing_shared(store: Store) -> None:
    _create(store)
    stale = store.write_shared(
        "plan",
        b"J1",
        if_version=None,
        by="r1",
        now=110.0,
        workflow_id="r1",
        owner="w0",
        entry=_shared_entry(),
        encode_result=lambda version: b"Jnull",
    )
    assert (stale.held, stale.version) == (False, None)
    assert store.read_shared("plan") is None
    assert [r.kind for r in store.journal("r1")] == ["run"]


def test_racing_compare_and_set_writers_lose_no_update(store_url: str, store: Store) -> None:
    # Each thread has a store of its own where the backend can share (SQLite file, PostgreSQL);
    # memory:// is one process's store, so its threads share the instance.
    writers, rounds = 4, 15
    stores = [store] * writers
    if not store_url.startswith("memory"):
        stores = [open_store(store_url) for _ in range(writers)]
    lost: list[int] = []

    def increment(s: Store, name: str) -> None:
        for _ in range(rounds):
            while True:
                row = s.read_shared("counter")
                version = 0 if row is None else row.version
                count = 0 if row is None else int(row.value[1:])
                done = s.write_shared(
                    "counter", f"J{count + 1}".encode(), if_version=version, by=name, now=1.0
                )
                if done.version is not None:
                    break
                lost.append(version)

    threads = [
        threading.Thread(target=increment, args=(stores[i], f"t{i}")) for i in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        history = store.shared_history("counter")
        assert [r.version for r in history] == list(range(1, writers * rounds + 1))
        assert [int(r.value[1:]) for r in history] == [r.version for r in history]
        assert sorted(r.by for r in history) == sorted(
            f"t{i}" for i in range(writers) for _ in range(rounds)
        )
    finally:
        for other in stores:
            if other is not store:
                other.close()


# -- lease fencing, verb by verb -------------------------------------------------------------

# Every verb that takes the caller's lease ``owner``, called by a stale owner: what it returns.
# ``create_run`` and ``take_lease`` name the owner they make; ``take_lease`` is fenced by
# ``expected_owner`` instead, and is in the table with a stale one.
_STALE_END: dict[str, Any] = {
    "owner": "w0",
    "status": "completed",
    "output": b"J1",
    "error": None,
    "now": 110,
    "entry": Entry(kind="run", name="finished", status="completed"),
}
STALE: dict[str, Callable[[Store], object]] = {
    "append": lambda s: s.append("r1", _step(1), owner="w0"),
    "append_many": lambda s: s.append_many("r1", [_step(1), _step(2)], owner="w0"),
    "append_async": lambda s: asyncio.run(s.append_async("r1", _step(1), owner="w0")),
    "mark_retry": lambda s: s.mark_retry("r1", owner="w0", marker="1:2"),
    "finish_run": lambda s: s.finish_run("r1", **_STALE_END),
    "finish_run_async": lambda s: asyncio.run(s.finish_run_async("r1", **_STALE_END)),
    "suspend_run": lambda s: s.suspend_run(
        "r1", owner="w0", wake_at=1.0, waiting_for=None, now=110, entry=_note("suspended")
    ),
    "release_run": lambda s: s.release_run("r1", owner="w0", now=110),
    "release_lease": lambda s: s.release_lease("r1", owner="w0", now=110),
    "record_progress": lambda s: s.record_progress(
        "r1", owner="w0", progress=b"J1", now=110, lease_until=500
    ),
    "renew_lease": lambda s: s.renew_lease("r1", owner="w0", lease_until=500),
    "publish_step": lambda s: s.publish_step("r1", owner="w0", current='{"name": "x"}'),
    "open_wait": lambda s: s.open_wait("r1", _wait(), owner="w0", approval=_ask()),
    "resolve_wait": lambda s: (
        s.resolve_wait("r1", _resolved(), owner="w0", time_out=True, now=110).winner
    ),
    "take_lease": lambda s: (
        s.take_lease("r1", owner="w9", expected_owner="w0", now=500, lease_until=600).taken
    ),
    "start_child": lambda s: _start_child(s, "r1/0", owner="w0"),
    "send_event": lambda s: _send(s, "r1", "r1", owner="w0"),
    "write_shared": lambda s: (
        s.write_shared(
            "plan",
            b"J1",
            if_version=None,
            by="r1",
            now=110,
            workflow_id="r1",
            owner="w0",
            entry=_shared_entry(),
        ).held
    ),
}
REFUSAL: dict[str, object] = {
    "renew_lease": None,
    "resolve_wait": "lost",
    "start_child": "lost",
    "send_event": "lost",
}


@pytest.mark.parametrize("verb", sorted(STALE))
def test_a_stale_owner_changes_nothing(store: Store, verb: str) -> None:
    _create(store)
    before = (store.get_run("r1"), store.journal("r1"), store.list_approvals(pending=False))
    assert STALE[verb](store) == REFUSAL.get(verb, False)
    assert (store.get_run("r1"), store.journal("r1"), store.list_approvals(pending=False)) == before


def test_every_owner_verb_is_in_the_fencing_table() -> None:
    fenced = {
        name
        for name in _protocol_verbs()
        if "owner" in inspect.signature(getattr(Store, name)).parameters
    }
    assert fenced - {"create_run"} == set(STALE)


# -- the contract covers the protocol ---------------------------------------------------------


def _protocol_verbs() -> list[str]:
    return sorted(
        name
        for role in Store.__mro__
        if role.__module__.startswith("stalwart._store.")
        for name, value in vars(role).items()
        if callable(value) and not name.startswith("_")
    )


# -- schedules ------------------------------------------------------------------------------


def _declare(store: Store, name: str = "nightly", **kwargs: Any) -> None:
    fields: dict[str, Any] = {
        "workflow": "agent",
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "catch_up": "latest",
        "input": b"J[]",
        "now": 100.0,
        "next_due": 200.0,
        **kwargs,
    }
    store.declare_schedule(name, **fields)


def _tick_run(wid: str, now: float = 200.0) -> ScheduledRun:
    entry = Entry(kind="run", name="started", status="completed", input=b"J[]")
    return ScheduledRun(
        workflow_id=wid, name="agent", queue="default", input=b"J[]", now=now, entry=entry
    )


def test_a_schedule_is_kept_and_declaring_it_again_keeps_its_last_tick(store: Store) -> None:
    _declare(store)
    (row,) = store.list_schedules()
    assert (row.name, row.workflow, row.cron, row.catch_up, row.input) == (
        "nightly",
        "agent",
        "0 3 * * *",
        "latest",
        b"J[]",
    )
    assert (row.last_tick, row.next_due, row.revision) == (100.0, 200.0, 1)
    assert store.advance_schedule(
        "nightly", revision=1, last_tick=100.0, tick=200.0, next_due=300.0, run=None
    )
    _declare(store, catch_up="all", input=b"J[1]", now=250.0, next_due=400.0)
    (row,) = store.list_schedules()
    # The last tick stays; the new declaration is due at once, to be planned under it.
    assert (row.cron, row.catch_up, row.input) == ("0 3 * * *", "all", b"J[1]")
    assert (row.last_tick, row.next_due, row.revision) == (200.0, 250.0, 2)
    # A new cron counts from its declaration: it owes no ticks from before it.
    _declare(store, cron="*/5 * * * *", catch_up="all", now=260.0, next_due=400.0)
    (row,) = store.list_schedules()
    assert (row.cron, row.last_tick, row.next_due, row.revision) == ("*/5 * * * *", 260.0, 260.0, 3)
    _declare(store, cron="*/5 * * * *", timezone="Europe/Paris", now=270.0, next_due=400.0)
    assert store.list_schedules()[0].last_tick == 270.0


def test_due_schedules_are_those_of_the_workflows_asked_for(store: Store) -> None:
    _declare(store, "a", next_due=200.0)
    _declare(store, "b", next_due=150.0)
    _declare(store, "other", workflow="mailer", next_due=50.0)
    assert store.next_schedule_due(names=["agent"]) == 150.0
    assert store.next_schedule_due(names=["nobody"]) is None
    assert [r.name for r in store.due_schedules(names=["agent"], now=160.0)] == ["b"]
    assert [r.name for r in store.due_schedules(names=["agent"], now=200.0)] == ["b", "a"]
    assert [r.name for r in store.due_schedules(names=["agent", "mailer"], now=60.0)] == ["other"]


def test_advancing_a_schedule_starts_the_ticks_run_in_the_same_transaction(
    store: Store,
) -> None:
    _declare(store)
    run = _tick_run("nightly@t1")
    assert store.advance_schedule(
        "nightly", revision=1, last_tick=100.0, tick=200.0, next_due=300.0, run=run
    )
    row = store.get_run("nightly@t1")
    assert row is not None and (row.status, row.name, row.lease_owner) == ("pending", "agent", None)
    assert [(e.kind, e.name) for e in store.journal("nightly@t1")] == [("run", "started")]
    (schedule,) = store.list_schedules()
    assert (schedule.last_tick, schedule.next_due) == (200.0, 300.0)
    # From a last tick that is no longer the schedule's: nothing written, no run.
    stale = _tick_run("nightly@t1-again")
    assert not store.advance_schedule(
        "nightly", revision=1, last_tick=100.0, tick=200.0, next_due=300.0, run=stale
    )
    assert store.get_run("nightly@t1-again") is None
    # Under a declaration that was replaced: nothing either.
    _declare(store, now=250.0)
    assert not store.advance_schedule(
        "nightly", revision=1, last_tick=200.0, tick=300.0, next_due=400.0, run=None
    )
    assert store.list_schedules()[0].last_tick == 200.0


def test_racing_advances_of_one_tick_start_one_run(shared_url: str) -> None:
    stores = [open_store(shared_url) for _ in range(4)]
    try:
        _declare(stores[0])
        barrier = threading.Barrier(len(stores))
        won: list[bool] = []

        def race(store: Store, n: int) -> None:
            barrier.wait()
            run = _tick_run(f"nightly@t1#{n}")  # ids differ: only the schedule's CAS decides
            won.append(
                store.advance_schedule(
                    "nightly", revision=1, last_tick=100.0, tick=200.0, next_due=300.0, run=run
                )
            )

        threads = [threading.Thread(target=race, args=(s, n)) for n, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(won) == [False, False, False, True]
        started = [stores[0].get_run(f"nightly@t1#{n}") for n in range(len(stores))]
        assert sum(row is not None for row in started) == 1
    finally:
        for store in stores:
            store.close()


def test_a_dropped_schedule_is_gone(store: Store) -> None:
    _declare(store)
    assert store.drop_schedule("nightly")
    assert not store.drop_schedule("nightly")
    assert store.list_schedules() == []
    assert not store.advance_schedule(
        "nightly", revision=1, last_tick=100.0, tick=200.0, next_due=300.0, run=None
    )


def test_every_protocol_verb_has_a_contract_test() -> None:
    source = "".join(path.read_text("utf-8") for path in Path(__file__).parent.glob("test_*.py"))
    untested = [verb for verb in _protocol_verbs() if not re.search(rf"\.{verb}\(", source)]
    assert untested == [], f"verbs with no contract test: {untested}"
    assert len(_protocol_verbs()) >= 38


# -- child runs ---------------------------------------------------------------------------


def _start_child(store: Store, child: str, *, parent: str = "r1", owner: str = "w1") -> str:
    return store.start_child(
        parent,
        _step(1, None, kind="child", status="scheduled", input=b"Jspec"),
        owner=owner,
        workflow_id=child,
        name="kid",
        queue="default",
        input=b"Jnull",
        now=101.0,
        started=Entry(kind="run", name="started", status="completed"),
        deadline=500.0,
    )


def test_start_child_creates_the_child_and_journals_it_in_the_held_parent(store: Store) -> None:
    _create(store)
    assert _start_child(store, "r1/0", owner="stale") == "lost"
    assert store.get_run("r1/0") is None
    assert _start_child(store, "r1/0") == "started"
    child = store.get_run("r1/0")
    assert child is not None and (child.status, child.parent_id, child.deadline) == (
        "pending",
        "r1",
        500.0,
    )
    assert _start_child(store, "r1/0") == "exists"  # a replay of its own start
    assert [r.kind for r in store.replay_index("r1")].count("child") == 2
    _create(store, "other", name="kid")
    assert _start_child(store, "other") == "taken"  # nobody's child
    _create(store, "r2")
    assert _start_child(store, "r1/0", parent="r2") == "taken"  # another parent's
    assert [
        r.workflow_id
        for r in store.list_runs(status=None, name=None, limit=9, before=None, parent_id="r1")
    ] == ["r1/0"]


def test_child_runs_lists_a_parents_children_and_their_end_wakes_it(store: Store) -> None:
    _create(store)
    for i in range(3):
        assert _start_child(store, f"r1/{i}") == "started"
    assert [c.workflow_id for c in store.child_runs("r1")] == ["r1/0", "r1/1", "r1/2"]
    assert store.child_runs("r1/0") == []
    assert store.suspend_run("r1", owner="w1", wake_at=None, waiting_for="child:r1/0", now=102.0)
    assert store.take_lease(
        "r1/0", owner="w2", expected_owner=None, now=103.0, lease_until=200.0
    ).taken
    assert not store.claimable("r1", now=104.0)
    assert store.finish_run(
        "r1/0",
        owner="w2",
        status="completed",
        output=b"J1",
        error=None,
        now=105.0,
        entry=Entry(kind="run", name="finished", status="completed"),
    )
    assert store.claimable("r1", now=105.0)  # woken by the child's end, in its transaction


def test_suspend_on_a_child_that_already_ended_does_not_suspend(store: Store) -> None:
    _create(store)
    _start_child(store, "r1/0")
    error = ErrorRecord("WorkflowCancelled", "x")
    entry = Entry(kind="operator", name="cancel", status="completed")
    assert store.cancel_run("r1/0", now=102.0, error=error, entry=entry) == "cancelled"
    assert not store.suspend_run(
        "r1", owner="w1", wake_at=None, waiting_for="child:r1/0", now=103.0
    )


def test_a_run_to_be_cancelled_neither_starts_a_child_nor_suspends(store: Store) -> None:
    _create(store)
    assert _start_child(store, "r1/0") == "started"
    entry = Entry(kind="operator", name="cancel", status="completed")
    assert store.cancel_run("r1", now=102.0, error=_CANCELLED, entry=entry) == "requested"
    assert _start_child(store, "r1/1") == "cancelling"
    assert store.get_run("r1/1") is None
    # its holder goes on, sees the cancel and processes it (cancelling its children with it)
    for waiting_for in ("child:r1/0", "event:go", None):
        assert not store.suspend_run(
            "r1", owner="w1", wake_at=200.0, waiting_for=waiting_for, now=103.0
        )
    row = store.get_run("r1")
    assert row is not None and (row.status, row.lease_owner) == ("running", "w1")


def test_redrive_reopens_a_parent_and_its_failed_or_cancelled_children_as_one(
    store: Store,
) -> None:
    _create(store)
    _start_child(store, "r1/0")
    end = Entry(kind="run", name="finished", status="failed")
    store.finish_run("r1", owner="w1", status="failed", output=None, error="{}", now=102, entry=end)
    note = Entry(kind="operator", name="retry", status="completed")

    def redrive(parent_id: str) -> bool:
        child = ChildRedrive("r1/0", parent_id, [note])
        return store.redrive("r1", now=103.0, entries=[note], children=[child])

    assert not redrive("r1")  # the child is pending: the whole retry is refused
    assert [r.status for r in (store.get_run("r1"), store.get_run("r1/0")) if r] == [
        "failed",
        "pending",
    ]
    entry = Entry(kind="operator", name="cancel", status="completed")
    store.cancel_run("r1/0", now=102.0, error=ErrorRecord("WorkflowCancelled"), entry=entry)
    journals = len(store.journal("r1")), len(store.journal("r1/0"))
    assert not redrive("r2")  # not that parent's child
    assert (len(store.journal("r1")), len(store.journal("r1/0"))) == journals
    assert redrive("r1")
    parent, child = store.get_run("r1"), store.get_run("r1/0")
    assert parent is not None and parent.status == "pending"
    assert child is not None and (child.status, child.error, child.cancel_requested) == (
        "pending",
        None,
        0,
    )
    assert (len(store.journal("r1")), len(store.journal("r1/0"))) == (
        journals[0] + 1,
        journals[1] + 1,
    )


def test_live_run_names_count_the_runs_not_ended_by_queue_and_name(store: Store) -> None:
    assert store.live_run_names() == []
    _create(store, "r1", owner=None)
    _create(store, "r2", owner="w", name="old")
    _create(store, "r3", owner=None, name="old", queue="llm")
    _create(store, "r4", owner="w", name="old")
    ended = Entry(kind="run", name="finished", status="completed")
    assert store.finish_run(
        "r4", owner="w", status="completed", output=None, error=None, now=101, entry=ended
    )
    assert sorted((r.queue, r.name, r.runs) for r in store.live_run_names()) == [
        ("default", "agent", 1),
        ("default", "old", 1),
        ("llm", "old", 1),
    ]


def test_a_runs_end_and_its_redrive_clear_the_step_its_holder_published(store: Store) -> None:
    """A later life of the run must not find the previous one's step: after a retry resets a
    step's attempts, a crash in that (seq, attempt) would be dated from the old start."""
    step = '{"name": "llm", "seq": 1, "attempt": 1, "started_at": 100.0}'

    def published(*wids: str) -> list[str | None]:
        return [row.current_step for row in map(store.get_run, wids) if row is not None]

    _create(store)
    _start_child(store, "r1/0")
    assert store.publish_step("r1", owner="w1", current=step)
    end = Entry(kind="run", name="finished", status="failed")
    assert store.finish_run(
        "r1", owner="w1", status="failed", output=None, error="{}", now=102, entry=end
    )
    assert published("r1") == [None]
    stale = "UPDATE runs SET current_step = :step"  # as a run ended before this was cleared
    execute_sql(store, stale, {"step": step})
    entry = Entry(kind="operator", name="cancel", status="completed")
    store.cancel_run("r1/0", now=102.0, error=ErrorRecord("WorkflowCancelled"), entry=entry)
    assert published("r1/0") == [None]
    execute_sql(store, stale, {"step": step})
    note = Entry(kind="operator", name="retry", status="completed")
    child = ChildRedrive("r1/0", "r1", [note])
    assert store.redrive("r1", now=103.0, entries=[note], children=[child])
    assert published("r1", "r1/0") == [None, None]


def test_a_detached_child_is_left_out_of_its_parents_attached_children(store: Store) -> None:
    _create(store)
    assert _start_child(store, "r1/0") == "started"
    entry = _step(2, None, kind="child", status="scheduled", input=b"Jspec")
    started = Entry(kind="run", name="started", status="completed")
    verdict = store.start_child(
        "r1", entry, owner="w1", workflow_id="r1/1", name="kid", queue="default",
        input=b"Jnull", now=102.0, started=started, detached=True,
    )  # fmt: skip
    assert verdict == "started"
    assert [c.workflow_id for c in store.child_runs("r1")] == ["r1/0", "r1/1"]
    assert [c.workflow_id for c in store.child_runs("r1", attached=True)] == ["r1/0"]
    child = store.get_run("r1/1")
    assert child is not None and child.parent_id == "r1"


# -- events one run sends another -------------------------------------------------------------


def _send(
    store: Store,
    sender: str,
    target: str,
    *,
    owner: str = "w1",
    key: str = "r1/0",
    seq: int = 1,
) -> str:
    entry = Entry(kind="send", name="go", status="completed", seq=seq, position=str(seq - 1))

    def outcome(verdict: str, message: str) -> Entry:
        if verdict in ("missing", "ended"):
            error = ErrorRecord("WorkflowNotFound" if verdict == "missing" else "Invalid", message)
            return dataclasses.replace(entry, status="failed", error=error)
        return dataclasses.replace(entry, output=b"Jtrue" if verdict == "delivered" else b"J0")

    return store.send_event(
        sender,
        entry,
        owner=owner,
        workflow_id=target,
        name="go",
        payload=b"J1",
        dedup_key=key,
        now=150.0,
        delivery=_note("send-event", by=sender),
        outcome=outcome,
    )


def test_send_event_delivers_and_journals_the_send_in_one_transaction(store: Store) -> None:
    _create(store)
    _create(store, "t", owner=None)
    assert _send(store, "r1", "t", owner="stale") == "lost"
    assert [r.name for r in store.journal("t")] == ["started"]
    assert [r.kind for r in store.journal("r1")] == ["run"]
    assert _send(store, "r1", "t") == "delivered"
    assert _send(store, "r1", "t", seq=2) == "duplicate"  # the same dedup key
    assert [r.name for r in store.journal("t")] == ["started", "send-event"]
    sends = [r for r in store.journal("r1") if r.kind == "send"]
    assert [(r.seq, r.status) for r in sends] == [(1, "completed"), (2, "completed")]
    assert _send(store, "r1", "nobody", key="k2", seq=3) == "missing"
    finished = Entry(kind="run", name="finished", status="completed")
    _create(store, "done")
    assert store.finish_run(
        "done", owner="w1", status="completed", output=None, error=None, now=5, entry=finished
    )
    assert _send(store, "r1", "done", key="k3", seq=4) == "ended"
    failed = [r for r in store.journal("r1") if r.kind == "send" and r.status == "failed"]
    assert [r.seq for r in failed] == [3, 4]
    assert _send(store, "r1", "r1", key="self", seq=5) == "delivered"  # to itself: one lock


# -- streams ------------------------------------------------------------------------------


def _chunk(origin: str, data: bytes = b'J"x"', *, stream: str = "default", seq: int | None = 1):
    from stalwart._store.base import NewChunk

    return NewChunk(stream, seq, 1, origin, data, 100.0)


def _offsets(store: Store, wid: str = "r1", stream: str = "default") -> list[int]:
    return [row.offset for row in store.read_chunks(wid, stream=stream, after=-1, limit=1000)]


def test_chunks_take_gap_free_offsets_per_stream_and_a_written_origin_adds_nothing(
    store: Store,
) -> None:
    from stalwart._store.base import RunChunks

    _create(store)
    _create(store, "r2", owner="w2")
    first = [_chunk("a.0"), _chunk("a.1", stream="other"), _chunk("a.2")]
    assert store.append_chunks([RunChunks("r1", "w1", first), RunChunks("r2", "w2", first)])
    again = [_chunk("a.2"), _chunk("a.3"), _chunk("a.1", stream="other")]  # a batch retried
    assert store.append_chunks([RunChunks("r1", "w1", again)]) == [True]
    assert _offsets(store) == [0, 1, 2]
    assert _offsets(store, stream="other") == [0]
    assert _offsets(store, "r2") == [0, 1]
    rows = store.read_chunks("r1", stream="default", after=0, limit=1)
    assert [(row.offset, row.seq, row.attempt, bytes(row.data)) for row in rows] == [
        (1, 1, 1, b'J"x"')
    ]
    assert isinstance(rows[0].data, bytes) and rows[0].at == 100.0


def test_a_stale_owner_writes_no_chunk(store: Store) -> None:
    from stalwart._store.base import RunChunks

    _create(store)
    batch = [RunChunks("r1", "w1", [_chunk("a.0")]), RunChunks("r1", "stale", [_chunk("b.0")])]
    assert store.append_chunks(batch) == [True, False]
    assert not store.append("r1", _step(1), owner="stale", chunks=[_chunk("b.1")])
    assert not store.append_many("r1", [_step(1)], owner="stale", chunks=[_chunk("b.2")])
    assert _offsets(store) == [0]


def test_a_steps_outcome_carries_the_chunks_before_it(store: Store) -> None:
    _create(store)
    assert store.append("r1", _step(1), owner="w1", chunks=[_chunk("a.0"), _chunk("a.1")])
    assert store.append_many("r1", [_step(2)], owner="w1", chunks=[_chunk("a.2")])
    assert _offsets(store) == [0, 1, 2]
    assert [row.seq for row in store.replay_index("r1") if row.kind == "step"] == [1, 2]
