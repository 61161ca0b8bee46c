"""The named queries: one shared ``sql/queries.sql`` and per dialect only the queries that differ
(``-- dialect:`` declarations), merged by ``load_queries``, which refuses a dialect that lacks
a declared query or writes one the shared file does not declare."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from stalwart._store.queries import load_queries, merge_queries

SHARED = """\
-- A header comment.

-- fragment: live
-- a comment the fragment drops
status = 'running'

-- name: count_live
SELECT count(*) FROM runs WHERE {{live}};

-- dialect: names_in
-- A list parameter.
"""


def _declared(kind: str, text: str) -> set[str]:
    return set(re.findall(rf"^-- {kind}: (\w+)\s*$", text, re.MULTILINE))


def test_both_dialects_resolve_every_shared_query_and_only_postgres_has_its_own() -> None:
    sql = resources.files("stalwart._store").joinpath("sql")
    shared_text = sql.joinpath("queries.sql").read_text("utf-8")
    shared = _declared("name", shared_text) | _declared("dialect", shared_text)
    sqlite, postgres = load_queries("sqlite"), load_queries("postgres")
    assert set(sqlite) == shared
    own = _declared("own", sql.joinpath("postgres", "queries.sql").read_text("utf-8"))
    assert set(postgres) == shared | own
    assert own == {
        "lock_migrations",
        "lock_run",
        "lock_run_skip_locked",
        "lock_queue",
        "run_exists",
        "server_time",
        "append_step_prepared",
        "create_run_ahead",
        "finish_run_ahead",
        "take_lease_ahead",
        "claim_in_batch",  # a batch of the pipeline sent whole: one statement a write
        "charge_in_batch",
        "finish_in_batch",
        "recover_in_batch",  # a recovery's claim, sent whole with its batch
        "append_chunks",  # a run's stream chunks in one statement of arrays
        "payloads_touched",  # the collector's batch read again in one statement
        "delete_payloads",  # and deleted in one
        "payloads_below",  # a journal's payload trees below their first level, in one query
        "no_jit",  # around it: its estimate would have JIT compile it for longer than it runs
    }
    # the dialects differ only where the shared file declares that they do
    differ = {name for name in shared if sqlite[name] != postgres[name]}
    assert differ == _declared("dialect", shared_text)
    assert not any("{{" in text for text in (*sqlite.values(), *postgres.values()))


def test_a_dialect_writes_its_declared_queries_and_owns_the_rest() -> None:
    dialect = "-- name: names_in\nSELECT 1;\n\n-- own: lock_all\nSELECT 2;\n"
    assert merge_queries(SHARED, dialect, "test") == {
        "count_live": "SELECT count(*) FROM runs WHERE status = 'running';",
        "names_in": "SELECT 1;",
        "lock_all": "SELECT 2;",
    }


@pytest.mark.parametrize(
    ("shared", "dialect", "message"),
    [
        (SHARED, "-- own: lock_all\nSELECT 2;\n", r"lacks the declared queries \['names_in'\]"),
        (
            SHARED,
            "-- name: names_in\nSELECT 1;\n-- name: count_live\nSELECT 3;\n",
            r"writes \['count_live'\], which sql/queries.sql does not declare",
        ),
        (
            SHARED,
            "-- name: names_in\nSELECT 1;\n-- name: typo\nSELECT 3;\n",
            r"writes \['typo'\]",
        ),
        (
            SHARED,
            "-- name: names_in\nSELECT 1;\n-- own: count_live\nSELECT 3;\n",
            r"owns \['count_live'\], which sql/queries.sql has",
        ),
        (SHARED + "SELECT 9;\n", "-- name: names_in\nSELECT 1;\n", "gives it SQL"),
        (
            SHARED + "-- name: names_in\nSELECT 9;\n",
            "-- name: names_in\nSELECT 1;\n",
            "both writes and declares",
        ),
        ("SELECT 0;\n" + SHARED, "-- name: names_in\nSELECT 1;\n", "SQL before its first block"),
        (SHARED, "-- fragment: live\nTRUE\n-- name: names_in\nSELECT 1;\n", "'-- fragment:'"),
        (SHARED, "-- name: names_in\nSELECT 1;\n-- name: names_in\nSELECT 1;\n", "two"),
    ],
)
def test_a_dialect_that_does_not_match_the_shared_file_fails_to_load(
    shared: str, dialect: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        merge_queries(shared, dialect, "test")


def test_a_query_naming_an_unknown_fragment_fails_to_load() -> None:
    with pytest.raises(KeyError, match="unknown fragment 'gone'"):
        merge_queries(SHARED + "-- name: x\nSELECT {{gone}};\n", "-- name: names_in\n;", "test")
