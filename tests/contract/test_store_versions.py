"""The store's versions, on every backend: it records its schema version and the oldest code
schema version that can use it, and ``require_oldest_compatible`` raises the latter in one
transaction, only upwards, whoever calls it and however often."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from stalwart._errors import StoreError, UsageError
from stalwart._store import Store, open_store
from stalwart._store.base import SCHEMA_VERSION, SchemaVersion
from stalwart._store.queries import load_migrations
from stalwart._store.sql import migrating
from stalwart.testing import execute_sql

ROWS = "SELECT version, oldest_compatible FROM stalwart_schema ORDER BY version"


def _declared_oldest() -> int:
    """The oldest code schema version this release's migrations leave a store serving."""
    return max(m.oldest_compatible for m in load_migrations("sqlite"))


@pytest.fixture
def shared_store(shared_url: str) -> Iterator[Store]:
    """A store other stores can open beside it (SQLite file, PostgreSQL schema)."""
    store = open_store(shared_url)
    yield store
    store.close()


def test_a_store_records_its_schema_version_and_the_oldest_code_it_serves(store: Store) -> None:
    assert store.schema_version() == SchemaVersion(SCHEMA_VERSION, _declared_oldest())
    rows = execute_sql(store, ROWS)
    assert [version for version, _ in rows] == [m.version for m in load_migrations("sqlite")]


def test_require_oldest_compatible_raises_it_on_the_latest_row_only_upwards(store: Store) -> None:
    before = [tuple(row) for row in execute_sql(store, ROWS)]
    store.require_oldest_compatible(SCHEMA_VERSION)
    assert store.schema_version() == SchemaVersion(SCHEMA_VERSION, SCHEMA_VERSION)
    after = [tuple(row) for row in execute_sql(store, ROWS)]
    assert after == [*before[:-1], (SCHEMA_VERSION, SCHEMA_VERSION)]
    store.require_oldest_compatible(SCHEMA_VERSION)  # again: nothing changes
    store.require_oldest_compatible(1)  # lower: never lowered
    assert [tuple(row) for row in execute_sql(store, ROWS)] == after


def test_require_oldest_compatible_refuses_what_is_no_schema_version_of_this_code(
    store: Store,
) -> None:
    for bad in (0, -1, SCHEMA_VERSION + 1, True, "3", 2.0):
        with pytest.raises(UsageError, match=f"from 1 to this code's {SCHEMA_VERSION}|an int"):
            store.require_oldest_compatible(bad)  # type: ignore[arg-type]
    assert store.schema_version() == SchemaVersion(SCHEMA_VERSION, _declared_oldest())


def test_processes_raising_it_at_once_leave_the_highest(shared_url: str) -> None:
    stores = [open_store(shared_url) for _ in range(3)]
    wanted = [SCHEMA_VERSION - 2, SCHEMA_VERSION, SCHEMA_VERSION - 1]
    start = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def raise_it(store: Store, version: int) -> None:
        start.wait()
        try:
            for _ in range(5):
                store.require_oldest_compatible(version)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=raise_it, args=pair) for pair in zip(stores, wanted, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    try:
        assert errors == []
        assert {s.schema_version() for s in stores} == {
            SchemaVersion(SCHEMA_VERSION, SCHEMA_VERSION)
        }
    finally:
        for store in stores:
            store.close()


def test_this_code_still_opens_the_store_and_older_code_is_refused(
    shared_store: Store, shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_store.require_oldest_compatible(SCHEMA_VERSION)
    open_store(shared_url).close()  # this code: the store is still its own
    monkeypatch.setattr(migrating, "SCHEMA_VERSION", SCHEMA_VERSION - 1)  # the release before
    with pytest.raises(StoreError) as refused:
        open_store(shared_url)
    assert (
        f"has schema version {SCHEMA_VERSION}, which needs stalwart code of schema version "
        f"{SCHEMA_VERSION} or newer, and this code's schema version is {SCHEMA_VERSION - 1}: "
        "upgrade stalwart on this machine"
    ) in str(refused.value)
