"""Garbage collection beside live writers (docs/lifecycle.md, "How garbage is collected
safely"): while one process prunes runs and collects the payload rows nothing references any
more, another keeps writing values equal to those the pruned runs used, reusing their rows as
they become garbage. Afterwards every payload of every run still in the store resolves: no
collector deleted a row a live writer referenced, on SQLite and on PostgreSQL. (With the writers'
refresh turned off, REFRESH = 1e9 in prune_agent.py, it fails on both: a run journaled between
the mark and the sweep is left referring to deleted rows.) The same on an encrypted store, whose
sealed rows name the rows they refer to in their refs column."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prune_agent import declare

from stalwart.testing import store_of

AGENT = Path(__file__).with_name("prune_agent.py")
SECONDS = 10.0

pytestmark = pytest.mark.timeout(120)


def _spawn(role: str, url: str, workdir: Path, encrypted: bool) -> subprocess.Popen[str]:
    mode = ["encrypted"] if encrypted else []
    return subprocess.Popen(
        [sys.executable, str(AGENT), role, url, str(workdir), str(SECONDS), *mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finished(child: subprocess.Popen[str]) -> dict[str, int]:
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, err
    result: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_value_reused_while_its_last_other_user_is_pruned_survives(
    fault_url: str, tmp_path: Path, encrypted: bool
) -> None:
    app, _old, _live = declare(fault_url, encrypted)  # creates the store before both open it
    with app:
        collector = _spawn("collector", fault_url, tmp_path, encrypted)
        writer = _spawn("writer", fault_url, tmp_path, encrypted)
        collected, written = _finished(collector), _finished(writer)
        assert collected["rounds"] >= 3 and written["runs"] >= 3
        assert collected["pruned"] == 3 * collected["rounds"]
        assert collected["collected"] > 0  # garbage was found and deleted meanwhile
        store = store_of(app)
        live = store.list_runs(status=None, name="live", limit=100_000, before=None)
        assert len(live) == written["runs"]
        for run in live:
            assert run.input is not None and run.output is not None
            store.load_payload(run.input)
            store.load_payload(run.output)
            entries = store.journal(run.workflow_id)  # every payload resolved, else CorruptRecord
            assert [entry.status for entry in entries][-1] == "completed"
            assert app.handle(run.workflow_id).result()["round"] >= 0
