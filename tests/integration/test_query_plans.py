"""The queries a process polls all the time use an index, never a scan of the whole runs table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import stalwart
from stalwart._store.sqlite import _Q
from stalwart.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


def test_cancel_poll_does_not_scan_every_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
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
