"""The overview's read verb, ``run_stats``, on every backend: runs created and ended per bucket,
step attempts with their failures and latency percentiles, spend by workflow; nothing before
the window counts."""

from __future__ import annotations

import pytest

from stalwart._model import ErrorRecord, Usage
from stalwart._store import Entry, Store
from stalwart._store.sql import reads

WIDTH = 100.0
SINCE = 1000.0


def _run(store: Store, wid: str, name: str, at: float) -> None:
    assert store.create_run(
        workflow_id=wid,
        name=name,
        status="running",
        queue="default",
        priority=0,
        input=b"Jnull",
        now=at,
        owner="w1",
        lease_until=at + 1000,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _attempt(
    store: Store, wid: str, seq: int, name: str, *, at: float, took: float, attempt: int = 1,
    failed: bool = False, usage: Usage | None = None,
) -> None:  # fmt: skip
    entry = Entry(
        kind="step",
        name=name,
        status="failed" if failed else "completed",
        seq=seq,
        position=str(seq - 1),
        attempt=attempt,
        started_at=at,
        finished_at=at + took,
        output=None if failed else b"J1",
        error=ErrorRecord("ValueError", "no") if failed else None,
        usage=usage,
    )
    assert store.append(wid, entry, owner="w1")


def _end(store: Store, wid: str, status: str, at: float) -> None:
    assert store.finish_run(
        wid,
        owner="w1",
        status=status,
        output=b"J1" if status == "completed" else None,
        error=None if status == "completed" else ErrorRecord("ValueError", "no").to_json(),
        now=at,
        entry=Entry(kind="run", name="finished", status="completed"),
    )


def test_run_stats_counts_the_window_by_bucket_step_and_workflow(store: Store) -> None:
    _run(store, "old", "agent", 500.0)  # before the window: none of it counts
    _attempt(store, "old", 1, "call", at=510.0, took=9.0, failed=True)
    _end(store, "old", "failed", 520.0)
    _run(store, "a", "agent", 1010.0)
    _attempt(store, "a", 1, "call", at=1011.0, took=1.0, failed=True, usage=Usage(10, 2, 0.5))
    _attempt(store, "a", 1, "call", at=1015.0, took=2.0, attempt=2, usage=Usage(100, 20, 1.25))
    _attempt(store, "a", 2, "search", at=1020.0, took=0.5)
    _end(store, "a", "completed", 1150.0)
    _run(store, "b", "agent", 1120.0)
    for seq, took in enumerate([3.0, 4.0, 5.0, 6.0], start=2):
        _attempt(store, "b", seq, "call", at=1130.0 + seq, took=took)
    _end(store, "b", "failed", 1260.0)
    _run(store, "c", "digest", 1290.0)  # still running

    stats = store.run_stats(since=SINCE, width=WIDTH)

    assert stats.started == [(0, 1), (1, 1), (2, 1)]
    assert stats.finished == [(1, "completed", 1), (2, "failed", 1)]
    by_step = {name: rest for name, *rest in stats.steps}
    # call: durations 1, 2, 3, 4, 5, 6 -> p50 the 3rd (3 s), p95 the 6th (6 s); one failure
    assert by_step["call"] == [6, 1, pytest.approx(3.0), pytest.approx(6.0)]
    assert by_step["search"] == [1, 0, pytest.approx(0.5), pytest.approx(0.5)]
    by_name = {name: rest for name, *rest in stats.workflows}
    assert by_name["agent"] == [2, 110, 22, pytest.approx(1.75)]
    assert by_name["digest"] == [1, 0, 0, 0.0]


def test_run_stats_samples_a_big_window_but_reads_a_rare_step_whole(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "SAMPLE", 10)  # percentiles from about 10 timed attempts
    monkeypatch.setattr(reads, "RARE", 2)  # a step sampled below 2 is read whole
    _run(store, "a", "agent", 1010.0)
    for seq in range(1, 41):  # call: 1 s ... 40 s
        _attempt(store, "a", seq, "call", at=1000.0 + seq, took=float(seq))
    for seq, took in ((41, 0.5), (42, 0.7), (43, 0.9)):
        _attempt(store, "a", seq, "rare", at=1100.0 + seq, took=took)
    steps = {name: rest for name, *rest in store.run_stats(since=SINCE, width=WIDTH).steps}
    attempts, failures, p50, p95 = steps["call"]
    assert (attempts, failures) == (40, 0)  # counted whole
    assert 10 <= p50 <= 30 and 30 <= p95 <= 40  # from the sample: every 5th attempt by id
    assert steps["rare"] == [3, 0, pytest.approx(0.7), pytest.approx(0.9)]  # read whole


def test_run_stats_of_an_empty_window_is_empty(store: Store) -> None:
    _run(store, "a", "agent", 100.0)
    stats = store.run_stats(since=SINCE, width=WIDTH)
    assert (stats.started, stats.finished, stats.steps, stats.workflows) == ([], [], [], [])


def test_run_stats_counts_interrupted_and_in_doubt_attempts_but_times_only_real_ones(
    store: Store,
) -> None:
    _run(store, "a", "agent", 1010.0)
    _attempt(store, "a", 1, "call", at=1011.0, took=2.0)
    # a crash interrupted attempt 1 of seq 2; recovery journaled it with no real duration
    _attempt(store, "a", 2, "call", at=1050.0, took=0.0, failed=True)
    _attempt(store, "a", 2, "call", at=1051.0, took=4.0, attempt=2)
    for seq in (3, 4):  # an irreversible step killed mid-call: in doubt
        doubt = Entry(
            kind="step", name="charge", status="in_doubt", seq=seq, position=str(seq - 1),
            attempt=1, started_at=1060.0 + seq, finished_at=1070.0 + seq,
        )  # fmt: skip
        assert store.append("a", doubt, owner="w1")
    # an operator settles seq 4's: its row (no duration) is the same attempt, counted once
    _attempt(store, "a", 4, "charge", at=1080.0, took=0.0)
    steps = {name: rest for name, *rest in store.run_stats(since=SINCE, width=WIDTH).steps}
    # call: 3 attempts, 1 failure; p50/p95 of the timed two (2 s, 4 s), never 0 ms
    assert steps["call"] == [3, 1, pytest.approx(2.0), pytest.approx(4.0)]
    assert steps["charge"] == [2, 0, None, None]
