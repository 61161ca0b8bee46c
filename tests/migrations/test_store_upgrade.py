"""A store release 0.2 wrote, upgraded by this release: in place, one migration at a time, its
runs in flight unharmed.

The SQLite store is the committed fixture (``data/store_02.db``, written by release 0.2 itself:
``make_02_store.py``), opened from a copy; the PostgreSQL one is written in the test by the
same 0.2 code into a fresh schema. Each holds runs completed, failed, suspended on an event, a
timer and an approval, a parent waiting on its child, and pending, with a schedule and shared
values. This release reads what 0.2 read of it, and completes its waiting runs when their event,
approval or timer arrives; during a rolling deploy a 0.2 worker keeps serving the upgraded store
until ``require_oldest_compatible`` (the first encrypted write's call) makes 0.2 refuse it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agent_02
import pytest
import release_02
import schema_rows

import stalwart
from stalwart._store.base import SCHEMA_VERSION
from stalwart._store.queries import load_migrations
from stalwart._store.sql import migrating
from stalwart.testing import execute_sql, store_of
from store_urls import postgres_schema_url

ROWS = "SELECT version, oldest_compatible FROM stalwart_schema ORDER BY version"
# What each waiting run returns once what it waits for arrives (events {"n": 5} and {"n": 6}).
FINISHED = {
    "wait-event-1": [11, {"n": 5}, 16],
    "wait-timer-1": 121,
    "parent-1": ["parent", "parent-1/1", [42, {"n": 6}, 48]],
    "pending-1": 9,
}
REFUSED_BY_02 = (
    f"has schema version {SCHEMA_VERSION}, which needs stalwart code of schema version "
    f"{SCHEMA_VERSION} or newer (this code has {release_02.SCHEMA}); upgrade stalwart"
)


@pytest.fixture(params=["sqlite", "postgres"])
def written_by_02(
    request: pytest.FixtureRequest, tmp_path: Path, python_02: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A store release 0.2 wrote, and what release 0.2 read of it."""
    if request.param == "sqlite":
        copy = tmp_path / "store_02.db"
        shutil.copyfile(release_02.FIXTURE, copy)
        yield f"sqlite:///{copy}", json.loads(release_02.EXPECTED.read_text())
        return
    for url in postgres_schema_url():
        expected = tmp_path / "store_02.json"
        done = release_02.agent(python_02, "write", url, str(expected))
        assert done.returncode == 0, done.stderr
        yield url, json.loads(expected.read_text())


def _as_02_read(got: Any, expected: Any) -> Any:
    """``got`` with only the fields release 0.2 had (this release adds some, e.g. a journal
    entry's ``id``), for comparing with what 0.2 read."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return {key: _as_02_read(got.get(key), value) for key, value in expected.items()}
    if isinstance(expected, list) and isinstance(got, list) and len(got) == len(expected):
        return [_as_02_read(g, e) for g, e in zip(got, expected, strict=True)]
    return got


def _reads_as_02_did(app: stalwart.Stalwart, expected: dict[str, Any]) -> None:
    got = json.loads(json.dumps(agent_02.reads(app)))
    for part, value in expected.items():
        assert _as_02_read(got[part], value) == value, part


def test_this_release_upgrades_a_02_store_in_place_and_completes_its_waiting_runs(
    written_by_02: tuple[str, dict[str, Any]],
) -> None:
    url, expected = written_by_02
    assert schema_rows.versions(url) == [(v, 1) for v in range(1, release_02.SCHEMA + 1)]
    with stalwart.Stalwart(url) as app:  # upgraded on open
        agent_02.declare(app)
        migrations = load_migrations("sqlite")
        oldest = [m.oldest_compatible for m in migrations]
        recorded = [(m.version, max(oldest[: i + 1])) for i, m in enumerate(migrations)]
        assert recorded[-1][0] == SCHEMA_VERSION
        assert [tuple(row) for row in execute_sql(store_of(app), ROWS)] == recorded
        _reads_as_02_did(app, expected)

        child = agent_02.child_of(app, "parent-1")
        app.send_event("wait-event-1", "go", {"n": 5})
        app.send_event(child, "go", {"n": 6})
        app.approve("wait-approval-1", by="operator", reason="fine")
        waiting = [*FINISHED, "wait-approval-1", child]
        agent_02.serve_until(
            app, lambda: all(app.handle(w).status() == "completed" for w in waiting)
        )
        for workflow_id, result in FINISHED.items():
            assert agent_02.outcome(app, workflow_id) == {"result": result}, workflow_id
        assert agent_02.outcome(app, "wait-approval-1") == {
            "result": [31, True, "operator", "fine"]
        }
        for ended in ("done-1", "done-shared", "failed-1"):  # the ended runs read the same
            assert agent_02.outcome(app, ended) == expected["outcomes"][ended]
            assert (
                _as_02_read(
                    json.loads(json.dumps(agent_02.reads(app)["journals"][ended])),
                    expected["journals"][ended],
                )
                == expected["journals"][ended]
            )


def test_an_upgraded_store_has_the_indexes_of_a_new_one(
    written_by_02: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Every migration's indexes, dropped, made partial or keyed anew (0027: a run's writes
    touch fewer), end the same on a store 0.2 wrote as on one this release creates whole."""
    url, _ = written_by_02
    with stalwart.Stalwart(url):
        pass
    upgraded = schema_rows.indexes(url)
    for new in _new_store(url, tmp_path):
        with stalwart.Stalwart(new):
            pass
        assert upgraded == schema_rows.indexes(new)
    gone = {"runs_by_created", "terminal_runs_by_update"}
    assert not gone & set(upgraded)
    # PostgreSQL keeps runs_by_wake whole: its planner counts a status's runs by it.
    partial = (
        ("runs_by_wake", "runs_by_parent") if url.startswith("sqlite") else ("runs_by_parent",)
    )
    for name in partial:
        assert "WHERE" in upgraded[name], upgraded[name]


def _new_store(url: str, tmp_path: Path) -> Iterator[str]:
    """A URL for a fresh store of the same backend as ``url``."""
    if url.startswith("sqlite:///"):
        yield f"sqlite:///{tmp_path / 'new.db'}"
    else:
        yield from postgres_schema_url()


def test_release_02_serves_the_store_across_the_upgrade_until_newer_code_is_required(
    written_by_02: tuple[str, dict[str, Any]], python_02: Path, tmp_path: Path
) -> None:
    url, _ = written_by_02
    stop = tmp_path / "stop"
    old_worker = subprocess.Popen(
        [str(python_02), str(release_02.AGENT), "serve", url, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=release_02.environment(),
    )
    try:
        assert old_worker.stdout is not None
        if old_worker.stdout.readline().strip() != "serving":
            pytest.fail(f"release 0.2's worker did not start: {old_worker.communicate()[1]}")
        with stalwart.Stalwart(url) as app:  # the deploy: this release upgrades the store
            workflows = agent_02.declare(app)
            assert store_of(app).schema_version().version == SCHEMA_VERSION
            app.send_event("wait-event-1", "go", {"n": 5})
            app.approve("wait-approval-1", by="new-release", reason="from 0.3")
            app.start(workflows["finished"], 11, workflow_id="started-by-0.3")
            served = ["wait-event-1", "wait-timer-1", "wait-approval-1", "pending-1"]
            for workflow_id in [*served, "started-by-0.3"]:  # by the 0.2 worker alone
                app.handle(workflow_id).result(timeout=60)
            stop.touch()
            assert old_worker.wait(timeout=60) == 0, old_worker.communicate()[1]
            assert app.handle("wait-approval-1").result() == [31, True, "new-release", "from 0.3"]
            assert app.handle("started-by-0.3").result() == {"sum": 12, "twice": 22}
            assert app.journal("wait-event-1")[-1].output == [11, {"n": 5}, 16]

            ran = release_02.agent(python_02, "run", url, "run-by-0.2")  # 0.2's app.run too
            assert ran.returncode == 0, ran.stderr
            assert json.loads(ran.stdout) == {"sum": 12, "twice": 22}
            assert app.handle("run-by-0.2").result() == {"sum": 12, "twice": 22}

            store_of(app).require_oldest_compatible(SCHEMA_VERSION)  # the first encrypted write
            refused = release_02.agent(python_02, "run", url, "refused-0.2")
            assert refused.returncode != 0 and REFUSED_BY_02 in refused.stderr, refused.stderr
            assert app.run(workflows["finished"], 1, workflow_id="still-0.3") == {
                "sum": 2,
                "twice": 2,
            }
            with pytest.raises(stalwart.WorkflowNotFound):
                app.handle("refused-0.2")
    finally:
        stop.touch()
        if old_worker.poll() is None:
            old_worker.kill()
        old_worker.communicate()


def test_an_upgrade_that_stops_midway_leaves_a_store_both_releases_use(
    python_02: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "store_02.db"
    shutil.copyfile(release_02.FIXTURE, copy)
    url = f"sqlite:///{copy}"
    real = load_migrations("sqlite")
    stops_at = release_02.SCHEMA + 2  # the second step of the upgrade fails
    broken = [m._replace(sql=m.sql + "\nINSERT INTO no_such_table VALUES (1);") if m.version ==
              stops_at else m for m in real]  # fmt: skip
    monkeypatch.setattr(migrating, "load_migrations", lambda backend: broken)
    with pytest.raises(stalwart.StoreError, match="no_such_table"):
        stalwart.Stalwart(url)
    assert (
        max(v for v, _ in schema_rows.versions(url)) == stops_at - 1
    )  # the step before it committed
    ran = release_02.agent(python_02, "run", url, "half-upgraded")  # 0.2 still uses it
    assert ran.returncode == 0, ran.stderr
    monkeypatch.undo()
    with stalwart.Stalwart(url) as app:  # the next open goes on from there
        agent_02.declare(app)
        assert store_of(app).schema_version().version == SCHEMA_VERSION
        assert app.handle("half-upgraded").result() == {"sum": 12, "twice": 22}
        _reads_as_02_did(app, {"outcomes": json.loads(release_02.EXPECTED.read_text())["outcomes"]})


def test_processes_opening_a_02_store_at_once_apply_each_step_once(
    written_by_02: tuple[str, dict[str, Any]],
) -> None:
    url, expected = written_by_02
    start = threading.Barrier(3)
    opened: list[stalwart.Stalwart] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            opened.append(stalwart.Stalwart(url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert errors == []
        numbers = [m.version for m in load_migrations("sqlite")]
        assert [v for v, _ in schema_rows.versions(url)] == numbers
        agent_02.declare(opened[0])
        _reads_as_02_did(opened[0], {"outcomes": expected["outcomes"]})
    finally:
        for app in opened:
            app.close()
