"""The prune verbs on every backend: which runs a filter selects, deleting them whole (the
precondition re-checked in the delete), and collecting what no run uses any more."""

from __future__ import annotations

import pytest
from test_store_contract import _create

from stalwart._store import Entry, Store
from stalwart._store.prunes import PruneFilter

pytestmark = pytest.mark.timeout(60)

BIG = b'J"' + b"x" * 5000 + b'"'  # kept apart from its row, in the payloads table


def _finish(store: Store, wid: str, *, output: bytes = b"J1", now: float = 200.0) -> None:
    done = Entry(kind="run", name="finished", status="completed")
    assert store.finish_run(
        wid, owner="w1", status="completed", output=output, error=None, now=now, entry=done
    )


def test_prunable_runs_are_ended_and_old_enough_and_pruned_whole(store: Store) -> None:
    _create(store, "old")
    _finish(store, "old", output=BIG, now=200.0)
    _create(store, "young")
    _finish(store, "young", now=900.0)
    _create(store, "running")  # not ended: never selected
    where = PruneFilter(before=500.0)
    assert store.prunable_runs(where, limit=10) == ["old"]
    assert store.count_prunable(where) == 1
    assert store.count_prunable(PruneFilter(before=500.0, status="failed")) == 0
    assert store.count_prunable(PruneFilter(before=500.0, name="other")) == 0
    assert store.prune_runs(["old", "young", "running"], where) == ["old"]  # re-checked
    assert store.get_run("old") is None and store.journal("old") == []
    assert store.get_run("young") is not None and store.get_run("running") is not None
    assert store.prune_runs(["old"], where) == []  # idempotent


def test_collectors_keep_what_is_used_and_delete_what_is_not(store: Store) -> None:
    _create(store, "gone")
    _finish(store, "gone", output=BIG)
    _create(store, "kept")
    _finish(store, "kept", output=BIG)  # the same value: one set of rows, used twice
    later = 10_000_000_000.0  # past every grace window
    assert store.collect_payloads(now=later) == 0
    assert store.prune_runs(["gone"], PruneFilter(before=later)) == ["gone"]
    assert store.collect_payloads(now=later) == 0  # "kept" still uses them
    row = store.get_run("kept")
    assert row is not None and row.output is not None
    assert store.load_payload(row.output) == BIG  # every row it needs is still there
    assert store.prune_runs(["kept"], PruneFilter(before=later)) == ["kept"]
    assert store.collect_payloads(now=later) > 0
    assert store.collect_payloads(now=later) == 0
    assert store.collect_chunks(now=later) == 0  # no snapshot ever stored one
    store.release_space()  # gives freed space back where the backend can; changes no row
    assert store.count_prunable(PruneFilter(before=later)) == 0
