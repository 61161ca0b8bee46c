"""A store this code cannot use is refused, on every backend and through the CLI, with a
``StoreError`` naming both schema versions and saying to upgrade; a newer store that still
serves this code is used; and each migration of an existing store commits alone, so one that
fails leaves the store at the step before it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import schema_rows

import stalwart
from cli_process import stalwart as stalwart_command
from stalwart._store import open_store
from stalwart._store.base import SCHEMA_VERSION
from stalwart._store.queries import Migration, load_migrations
from stalwart._store.sql import migrating
from stalwart.testing import execute_sql, store_of

ROWS = "SELECT version, oldest_compatible FROM stalwart_schema ORDER BY version"
NEWER = SCHEMA_VERSION + 3  # a later release's schema version
NEEDS = SCHEMA_VERSION + 1  # the oldest code it serves, after a contracting step
REFUSAL = (
    f"has schema version {NEWER}, which needs stalwart code of schema version {NEEDS} or "
    f"newer, and this code's schema version is {SCHEMA_VERSION}: upgrade stalwart on this "
    "machine"
)


def _upgraded_by_a_later_release(url: str, *, oldest: int) -> list[Any]:
    """Create the store with this code, then record what a later release's migrations would:
    version ``NEWER``, serving code from ``oldest`` on. Its rows."""
    store = open_store(url)
    try:
        execute_sql(
            store,
            "INSERT INTO stalwart_schema (version, oldest_compatible) VALUES (:v, :o)",
            {"v": NEWER, "o": oldest},
        )
        return [tuple(row) for row in execute_sql(store, ROWS)]
    finally:
        store.close()


def test_a_store_that_needs_newer_code_is_refused_naming_both_versions(shared_url: str) -> None:
    rows = _upgraded_by_a_later_release(shared_url, oldest=NEEDS)
    with pytest.raises(stalwart.StoreError) as refused:
        stalwart.Stalwart(shared_url)
    assert REFUSAL in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(stalwart.StoreError, match="upgrade stalwart"):
        open_store(shared_url)  # refused again, the same way
    assert schema_rows.versions(shared_url) == rows  # and the refusals wrote nothing


def test_the_cli_refuses_it_in_one_error_line(shared_url: str, tmp_path: Path) -> None:
    _upgraded_by_a_later_release(shared_url, oldest=NEEDS)
    for command in (["ls"], ["approvals"]):
        done = stalwart_command("--url", shared_url, *command, cwd=tmp_path, clean=True)
        assert done.returncode == 1, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: the store ") and REFUSAL in line


def test_a_memory_store_is_checked_the_same_way() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stalwart.NotDurableWarning)
        store: Any = open_store("memory://")
    try:  # a memory store lives in this process: a later release's rows are written by hand
        execute_sql(store, "INSERT INTO stalwart_schema VALUES (:v, :o)", {"v": NEWER, "o": NEEDS})
        with pytest.raises(stalwart.StoreError) as refused:
            store._migrate()  # what opening it does
        assert REFUSAL in str(refused.value)
    finally:
        store.close()


def test_a_newer_store_that_still_serves_this_code_is_used_as_it_is(shared_url: str) -> None:
    rows = _upgraded_by_a_later_release(shared_url, oldest=1)  # the later release only added
    with stalwart.Stalwart(shared_url) as app:

        @app.workflow
        def hello(name: str) -> str:
            return f"hello {name}"

        assert app.run(hello, "again", workflow_id="on-a-newer-store") == "hello again"
        assert [tuple(row) for row in execute_sql(store_of(app), ROWS)] == rows


def test_each_migration_commits_alone_so_a_failed_one_leaves_the_step_before(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stalwart.Stalwart(shared_url) as app:

        @app.workflow
        def before(x: int) -> int:
            return x + 1

        assert app.run(before, 1, workflow_id="before-the-upgrade") == 2
    real = load_migrations
    added = Migration(SCHEMA_VERSION + 1, "added", "CREATE TABLE next_added (x INTEGER);", 1)
    broken = Migration(
        SCHEMA_VERSION + 2,
        "broken",
        "CREATE TABLE half_done (x INTEGER);\nINSERT INTO no_such_table VALUES (1);",
        1,
    )
    monkeypatch.setattr(migrating, "SCHEMA_VERSION", SCHEMA_VERSION + 2)
    monkeypatch.setattr(
        migrating, "load_migrations", lambda backend: [*real(backend), added, broken]
    )
    with pytest.raises(stalwart.StoreError, match="no_such_table"):
        stalwart.Stalwart(shared_url)
    # The first step committed with the row that records it; the failed one left nothing.
    assert max(v for v, _ in schema_rows.versions(shared_url)) == SCHEMA_VERSION + 1
    assert schema_rows.has_table(shared_url, "next_added")
    assert not schema_rows.has_table(shared_url, "half_done")
    fixed = broken._replace(sql="CREATE TABLE half_done (x INTEGER);")
    monkeypatch.setattr(
        migrating, "load_migrations", lambda backend: [*real(backend), added, fixed]
    )
    with stalwart.Stalwart(shared_url) as app:  # the next open goes on from there
        assert store_of(app).schema_version().version == SCHEMA_VERSION + 2
        assert schema_rows.has_table(shared_url, "half_done")
        assert app.handle("before-the-upgrade").result(timeout=0) == 2
