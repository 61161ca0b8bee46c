"""The store extension port's contract, on every backend: migrations applied once per store
(also from two apps at once), commit and rollback, ``:name`` placeholders on both dialects,
and the namespace's table-name check."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import stalwart
from stalwart._extension import ExtensionStore, Migration, Transaction

NOTES = Migration(
    1,
    sqlite="CREATE TABLE ext_demo_notes (k TEXT PRIMARY KEY, v BLOB NOT NULL)",
    postgres="CREATE TABLE ext_demo_notes (k TEXT PRIMARY KEY, v BYTEA NOT NULL)",
)
# Not idempotent on purpose: applied twice, the second CREATE fails.
TAGS = Migration(
    2,
    sqlite="-- tags of a note\nCREATE TABLE ext_demo_tags (k TEXT, tag TEXT);\n"
    "CREATE INDEX ext_demo_tags_k ON ext_demo_tags (k)",
    postgres="CREATE TABLE ext_demo_tags (k TEXT, tag TEXT);\n"
    "CREATE INDEX ext_demo_tags_k ON ext_demo_tags (k)",
)


@pytest.fixture
def app(store_url: str) -> Iterator[stalwart.Stalwart]:
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def test_a_namespace_is_migrated_once_and_later_versions_only_once(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as first, stalwart.Stalwart(shared_url) as second:
        assert ExtensionStore(first, "demo", [NOTES]).version() == 1
        assert ExtensionStore(second, "demo", [NOTES]).version() == 1  # nothing applied twice
        ext = ExtensionStore(second, "demo", [NOTES, TAGS])
        assert ext.version() == 2
        assert ExtensionStore(first, "demo", [NOTES, TAGS]).version() == 2
        rows = ext.fetchall("SELECT namespace, version FROM stalwart_extensions")
        assert rows == [("demo", 2)]
        assert ext.fetchall("SELECT k, tag FROM ext_demo_tags") == []


def test_two_apps_starting_at_once_apply_the_migrations_once(shared_url: str) -> None:
    apps = [stalwart.Stalwart(shared_url) for _ in range(4)]
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(apps))

    def start(app: stalwart.Stalwart) -> None:
        barrier.wait()
        try:
            ExtensionStore(app, "demo", [NOTES, TAGS])
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failures == []
        assert ExtensionStore(apps[0], "demo", [NOTES, TAGS]).version() == 2
    finally:
        for app in apps:
            app.close()


def test_namespaces_keep_their_own_versions(app: stalwart.Stalwart) -> None:
    ExtensionStore(app, "demo", [NOTES, TAGS])
    other = ExtensionStore(
        app,
        "other",
        [
            Migration(
                1, "CREATE TABLE ext_other_x (a INTEGER)", "CREATE TABLE ext_other_x (a INTEGER)"
            )
        ],
    )
    assert other.version() == 1
    assert sorted(other.fetchall("SELECT namespace, version FROM stalwart_extensions")) == [
        ("demo", 2),
        ("other", 1),
    ]


def test_a_store_newer_than_the_code_is_refused(app: stalwart.Stalwart) -> None:
    ExtensionStore(app, "demo", [NOTES, TAGS])
    with pytest.raises(stalwart.StoreError, match="upgrade the integration"):
        ExtensionStore(app, "demo", [NOTES])


def test_a_failing_migration_leaves_nothing_behind(app: stalwart.Stalwart) -> None:
    ExtensionStore(app, "demo", [NOTES])
    broken = Migration(
        2,
        sqlite="CREATE TABLE ext_demo_half (a INTEGER); INSERT INTO ext_demo_nope VALUES (1)",
        postgres="CREATE TABLE ext_demo_half (a INTEGER); INSERT INTO ext_demo_nope VALUES (1)",
    )
    with pytest.raises(stalwart.StoreError):
        ExtensionStore(app, "demo", [NOTES, broken])
    ext = ExtensionStore(app, "demo", [NOTES])
    assert ext.version() == 1
    fixed = Migration(
        2, "CREATE TABLE ext_demo_half (a INTEGER)", "CREATE TABLE ext_demo_half (a INTEGER)"
    )
    assert ExtensionStore(app, "demo", [NOTES, fixed]).version() == 2  # the table was not left


def test_a_transaction_commits_on_exit_and_rolls_back_on_an_exception(
    app: stalwart.Stalwart,
) -> None:
    ext = ExtensionStore(app, "demo", [NOTES])
    insert = "INSERT INTO ext_demo_notes (k, v) VALUES (:k, :v)"
    with ext.transaction() as tx:
        assert tx.execute(insert, {"k": "kept", "v": b"\x00\xff"}) == 1
        assert tx.fetchone("SELECT v FROM ext_demo_notes WHERE k = :k", {"k": "kept"}) == (
            b"\x00\xff",
        )
    with pytest.raises(RuntimeError, match="boom"), ext.transaction() as tx:
        tx.execute(insert, {"k": "lost", "v": b"1"})
        tx.execute("UPDATE ext_demo_notes SET v = :v WHERE k = :k", {"k": "kept", "v": b"2"})
        raise RuntimeError("boom")

    def fails(tx: Transaction) -> None:
        tx.execute(insert, {"k": "lost too", "v": b"1"})
        raise KeyError("boom")

    with pytest.raises(KeyError):
        ext.run(fails)
    assert ext.fetchall("SELECT k, v FROM ext_demo_notes ORDER BY k") == [("kept", b"\x00\xff")]


def test_writes_are_seen_by_another_app_after_commit(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as first, stalwart.Stalwart(shared_url) as second:
        mine, theirs = (ExtensionStore(a, "demo", [NOTES]) for a in (first, second))
        assert mine.execute("INSERT INTO ext_demo_notes VALUES (:k, :v)", {"k": "a", "v": b"x"})
        assert theirs.fetchone("SELECT v FROM ext_demo_notes WHERE k = :k", {"k": "a"}) == (b"x",)
        assert theirs.fetchone("SELECT v FROM ext_demo_notes WHERE k = :k", {"k": "b"}) is None


def test_placeholders_and_percent_signs_mean_the_same_on_both_dialects(
    app: stalwart.Stalwart,
) -> None:
    ext = ExtensionStore(app, "demo", [NOTES])
    ext.execute("INSERT INTO ext_demo_notes VALUES (:k, :v)", {"k": "50%", "v": b"half"})
    ext.execute("INSERT INTO ext_demo_notes VALUES (:k, :v)", {"k": "5", "v": b"five"})
    rows = ext.fetchall("SELECT k FROM ext_demo_notes WHERE k LIKE '%\\%' ESCAPE '\\'")
    assert rows == [("50%",)]
    assert ext.fetchall(
        "SELECT k FROM ext_demo_notes WHERE k = :k OR k = :k || '%'", {"k": "50"}
    ) == [("50%",)]


def test_arun_runs_one_transaction_off_the_event_loop(app: stalwart.Stalwart) -> None:
    ext = ExtensionStore(app, "demo", [NOTES])

    def put(tx: Transaction) -> int:
        return tx.execute("INSERT INTO ext_demo_notes VALUES (:k, :v)", {"k": "async", "v": b"1"})

    assert asyncio.run(ext.arun(put)) == 1
    assert ext.fetchone("SELECT count(*) FROM ext_demo_notes") == (1,)


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("CREATE TABLE runs_copy (a INTEGER)", "runs_copy"),
        ("CREATE INDEX ext_demo_i ON runs (status)", "runs"),
        ("ALTER TABLE runs ADD COLUMN x TEXT", "runs"),
        ("DROP TABLE IF EXISTS journal", "journal"),
        ("CREATE TABLE ext_other_x (a INTEGER)", "ext_other_x"),
        ("CREATE TABLE ext_demo_x (k TEXT REFERENCES runs (workflow_id))", "runs"),
        ('CREATE TABLE IF NOT EXISTS "payloads" (a INTEGER)', '"payloads"'),
    ],
)
def test_a_migration_may_name_only_its_namespace_tables(
    app: stalwart.Stalwart, sql: str, named: str
) -> None:
    with pytest.raises(stalwart.UsageError, match=f"names {named}: .* ext_demo_"):
        ExtensionStore(app, "demo", [Migration(1, sqlite=sql, postgres=sql)])


def test_namespaces_and_versions_are_checked(app: stalwart.Stalwart) -> None:
    for bad in ("", "Demo", "1demo", "demo-x", "demo_"):
        with pytest.raises(stalwart.UsageError, match="namespace"):
            ExtensionStore(app, bad, [])
    with pytest.raises(stalwart.UsageError, match="1, 2, 3"):
        ExtensionStore(app, "demo", [TAGS])
    # ON DELETE / ON CONFLICT are clauses, not table names
    fine = "CREATE TABLE ext_demo_y (a INTEGER PRIMARY KEY ON CONFLICT REPLACE)"
    keyed = (
        "CREATE TABLE ext_demo2_a (a INTEGER PRIMARY KEY);"
        "CREATE TABLE ext_demo2_b (a INTEGER REFERENCES ext_demo2_a (a) ON DELETE CASCADE)"
    )
    ExtensionStore(app, "demo", [Migration(1, fine, "CREATE TABLE ext_demo_y (a INTEGER)")])
    assert ExtensionStore(app, "demo2", [Migration(1, keyed, keyed)]).version() == 1
