"""Rolling deploys: migrations are expand-then-contract, so the previous release keeps working.

The old worker here is the real previous release: the source tree of the last commit of schema
version 5, taken from this repository's history with ``git archive`` and run in a subprocess
beside a store that this release migrated to version 6.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart._store.base import SCHEMA_VERSION
from stalwart._store.queries import Migration, load_migrations
from stalwart._store.sql import migrating as sql_module
from stalwart.testing import raw_rows, store_of

ROOT = Path(__file__).resolve().parents[2]
OLD_RELEASE = "9e5306c"  # the last commit whose code wrote schema version 5
OLD_SCHEMA = 5
# Dropping an index changes no row older code reads, only its plans, unless a query names the
# index (SQLite's INDEXED BY): the test below checks that no query of this code names a dropped
# index, and a migration that drops one names in its header the older code that does.
CONTRACTING = re.compile(r"\b(DROP(?!\s+INDEX\b)|RENAME|ALTER\s+COLUMN)\b", re.IGNORECASE)
DROPPED_INDEX = re.compile(r"\bDROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?(\w+)", re.IGNORECASE)
CREATED_INDEX = re.compile(r"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)

OLD_WORKER = textwrap.dedent(
    """
    import sys, threading, time
    import stalwart
    from stalwart._store.base import SCHEMA_VERSION
    from stalwart._worker import Worker

    assert SCHEMA_VERSION == OLD_SCHEMA, SCHEMA_VERSION
    url, mode, ids = sys.argv[1], sys.argv[2], sys.argv[3:]
    app = stalwart.Stalwart(url)

    @app.step
    def double(x: int) -> int:
        return 2 * x

    @app.workflow(name="deploy_wf")
    def deploy_wf(x: int) -> int:
        return double(x) + double(x + 1)

    if mode == "run":
        print(app.run(deploy_wf, 5, workflow_id=ids[0]))
    else:
        worker = Worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve)
        thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(app.handle(i).status() == "completed" for i in ids):
                break
            time.sleep(0.05)
        worker.stop()
        thread.join()
        print("served", len(ids))
    app.close()
    """
).replace("OLD_SCHEMA", str(OLD_SCHEMA))


@pytest.fixture(scope="module")
def old_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``src`` tree, from git history."""
    target = tmp_path_factory.mktemp("old-release")
    archive = target / "src.tar"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), OLD_RELEASE, "src"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = f"the previous release {OLD_RELEASE} is not in this checkout's history"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: {done.stderr.strip()} (CI needs a full clone)")
        pytest.skip(reason)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def _old(old_src: Path, url: str, mode: str, *ids: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(old_src)}
    done = subprocess.run(
        [sys.executable, "-c", OLD_WORKER, url, mode, *ids],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _declare(app: stalwart.Stalwart) -> Any:
    @app.step
    def double(x: int) -> int:
        return 2 * x

    @app.workflow(name="deploy_wf")
    def deploy_wf(x: int) -> int:
        return double(x) + double(x + 1)

    return deploy_wf


def test_an_old_worker_keeps_working_beside_a_store_this_release_migrated(
    old_release: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    # The old release creates the store, as it did in production before the deploy.
    assert _old(old_release, url, "run", "before-deploy") == "22"
    with stalwart.Stalwart(url) as app:  # the new release migrates it on open (expand)
        wf = _declare(app)
        assert app.handle("before-deploy").status() == "completed"
        for i in range(4):
            app.start(wf, i, workflow_id=f"mixed-{i}")
    # An old worker that was never restarted serves runs the new release enqueued ...
    assert _old(old_release, url, "serve", *[f"mixed-{i}" for i in range(4)]) == "served 4"
    # ... and its app.run works too.
    assert _old(old_release, url, "run", "old-after-deploy") == "22"
    with stalwart.Stalwart(url) as app:
        _declare(app)
        assert [app.handle(f"mixed-{i}").result(timeout=5) for i in range(4)] == [2, 6, 10, 14]
        assert app.handle("old-after-deploy").result(timeout=5) == 22
        versions = raw_rows(store_of(app), "schema_version", {})
        assert versions == [(SCHEMA_VERSION, 1)]  # version 6 still serves code of version 1+


def test_migrations_are_the_same_versions_on_every_backend_and_contract_only_when_declared() -> (
    None
):
    by_backend = {backend: load_migrations(backend) for backend in ("sqlite", "postgres")}
    for backend, migrations in by_backend.items():
        versions = [m.version for m in migrations]
        assert versions == list(range(1, SCHEMA_VERSION + 1)), backend
        for m in migrations:
            code = "\n".join(
                line for line in m.sql.splitlines() if not line.lstrip().startswith("--")
            )
            if CONTRACTING.search(code):
                assert m.oldest_compatible > 1, (
                    f"{backend} migration {m.version}_{m.name} drops or changes what older code "
                    "reads: declare '-- oldest-compatible: N' (expand first, contract a release "
                    "later)"
                )
    assert [m.oldest_compatible for m in by_backend["sqlite"]] == [
        m.oldest_compatible for m in by_backend["postgres"]
    ]


def test_no_query_names_an_index_a_migration_dropped() -> None:
    """SQLite's INDEXED BY fails where the index is gone: a migration that drops an index
    changes the queries that name it in the same commit."""
    from stalwart._store.sqlite import _Q

    gone: set[str] = set()
    for m in load_migrations("sqlite"):
        code = "\n".join(line for line in m.sql.splitlines() if not line.lstrip().startswith("--"))
        gone = (gone | set(DROPPED_INDEX.findall(code))) - set(CREATED_INDEX.findall(code))
    named = {
        (name, index)
        for name, sql in _Q.items()
        for index in re.findall(r"\bINDEXED\s+BY\s+(\w+)", sql, re.IGNORECASE)
    }
    assert gone and named, "nothing dropped or named: this test checks nothing"
    assert not {(name, index) for name, index in named if index in gone}


def test_a_contracting_migration_is_recorded_and_older_code_refuses_with_what_to_do(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stalwart.Stalwart(shared_url):
        pass  # at this release's version
    future = Migration(
        SCHEMA_VERSION + 1,
        "future",
        "-- oldest-compatible: 7\nCREATE TABLE future_only (x INTEGER);",
        SCHEMA_VERSION + 1,
    )
    real = sql_module.load_migrations
    monkeypatch.setattr(sql_module, "load_migrations", lambda backend: [*real(backend), future])
    monkeypatch.setattr(sql_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with stalwart.Stalwart(shared_url) as app:  # the next release migrates and contracts
        versions = raw_rows(store_of(app), "schema_version", {})
        assert versions == [(SCHEMA_VERSION + 1, SCHEMA_VERSION + 1)]
    monkeypatch.undo()
    with pytest.raises(stalwart.StoreError, match="upgrade stalwart on this machine"):
        stalwart.Stalwart(shared_url)
