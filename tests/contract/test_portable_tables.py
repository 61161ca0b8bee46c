"""The one list of tables that ``migrate``, ``export`` and ``import`` follow
(``_store/portable/tables.py``) names every table of a fresh store, on every backend: a table
a migration adds and the list forgets fails here, not in a user's migrated store."""

from __future__ import annotations

import stalwart
from stalwart import testing
from stalwart._store.portable.access import Bulk
from stalwart._store.portable.tables import COPIED, NOT_COPIED


def test_every_table_of_the_schema_is_in_the_list(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:
        bulk = Bulk(testing.store_of(app))
        schema = {name for name in bulk.tables() if not name.startswith("ext_")}
        listed = {entry.name for entry in COPIED} | set(NOT_COPIED)
        assert schema - listed == set(), "add these tables to _store/portable/tables.py"
        assert {entry.name for entry in COPIED} - schema == set(), "a table that is gone"


def test_each_listed_key_is_the_tables_primary_key(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:
        bulk = Bulk(testing.store_of(app))
        for entry in COPIED:
            if not bulk.columns(entry.name):
                continue
            primary = bulk.primary_key(entry.name)
            # SQLite's snapshot_chunks is keyed by its rowid, its digest unique
            assert primary in (entry.key, (entry.identity,)), entry.name
            assert set(entry.payloads) <= set(bulk.columns(entry.name)), entry.name
