"""Review: polling queries that scan the whole runs table (strict xfail proves it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import stalwart
from stalwart._store.sqlite import _Q
from stalwart.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


@pytest.mark.xfail(
    strict=True,
    reason="the lease keeper runs cancel_requested_for every 0.25 s while it holds any run, "
    "and its substr(lease_owner, ...) predicate cannot use an index: a full scan of runs, "
    "which grows with every finished run ever kept",
)
def test_cancel_poll_does_not_scan_every_run(tmp_path: Path) -> None:
    path = tmp_path / "review.db"
    with stalwart.Stalwart(f"sqlite:///{path}", clock=FakeClock()):
        pass
    with sqlite3.connect(path) as db:
        plan = [
            row[-1]
            for row in db.execute(
                "EXPLAIN QUERY PLAN " + _Q["cancel_requested_for"], {"owner_prefix": "host/1/"}
            )
        ]
    assert not any(step.startswith("SCAN runs") for step in plan), plan
