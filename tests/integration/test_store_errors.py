"""Opening stores: URLs, errors that say what to do, migrations and payload storage."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

import stalwart
from stalwart._store.base import SCHEMA_VERSION
from stalwart._store.queries import load_migrations
from stalwart.testing import raw_connection, store_of


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://root:hunter2@db/x", "unknown store URL 'mysql://root:***@db/x'"),
        ("sqlite://relative.db", "bad SQLite URL"),
        ("nonsense", "unknown store URL"),
        ("postgresql://app:s3cret@127.0.0.1:1/db", "postgresql://app:***@127.0.0.1:1/db"),
    ],
)
def test_bad_urls(url: str, fragment: str) -> None:
    with pytest.raises(stalwart.StoreError) as info:
        stalwart.Stalwart(url)
    assert fragment in str(info.value)
    assert "hunter2" not in str(info.value) and "s3cret" not in str(info.value)


def test_unusable_sqlite_files(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(stalwart.StoreError, match="garbage.db"):
        stalwart.Stalwart(f"sqlite:///{garbage}")
    if os.geteuid() != 0:  # root can write anywhere
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        with pytest.raises(stalwart.StoreError, match="writable"):
            stalwart.Stalwart(f"sqlite:///{locked / 'x.db'}")


def test_a_sqlite_path_in_a_folder_that_does_not_exist_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    typo = tmp_path / "typo" / "dir"
    with pytest.raises(
        stalwart.UsageError, match=re.escape(f"the folder '{typo}' does not exist")
    ) as info:
        stalwart.Stalwart(f"sqlite:///{typo / 'x.db'}")
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []  # no folder, no empty store
    monkeypatch.chdir(tmp_path)
    with pytest.raises(stalwart.UsageError, match="the folder 'missing' does not exist"):
        stalwart.Stalwart("sqlite:///missing/x.db")
    (tmp_path / "file").write_text("")
    with pytest.raises(stalwart.UsageError, match="'file' is not a folder"):
        stalwart.Stalwart("sqlite:///file/x.db")
    # The default store's own folder is made, wherever it is asked for, but not its parents.
    stalwart.Stalwart("sqlite:///.stalwart/other.db").close()
    with pytest.raises(stalwart.UsageError, match="does not exist"):
        stalwart.Stalwart(f"sqlite:///{tmp_path / 'sub' / '.stalwart' / 'x.db'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".stalwart", "file"]


def test_default_url_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STALWART_URL", raising=False)
    with stalwart.Stalwart() as app:
        assert app.url == "sqlite:///.stalwart/stalwart.db"
    assert (tmp_path / ".stalwart" / "stalwart.db").exists()
    monkeypatch.setenv("STALWART_URL", f"sqlite:///{tmp_path / 'env.db'}")
    with stalwart.Stalwart():
        pass
    assert (tmp_path / "env.db").exists()


def test_memory_store_warns_it_is_not_durable() -> None:
    with pytest.warns(stalwart.NotDurableWarning, match="tests only"):
        stalwart.Stalwart("memory://").close()


def test_sqlite_settings(tmp_path: Path) -> None:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'a.db'}") as app:
        conn = raw_connection(store_of(app))
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'b.db'}", durability="power") as app:
        conn = raw_connection(store_of(app))
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_migrations_are_versioned_and_a_newer_schema_is_refused(tmp_path: Path) -> None:
    versions = [m.version for m in load_migrations("sqlite")]
    # numbered from 1, each once, in order (a number another branch holds may be missing
    # until it is merged), the last this code's schema version
    assert versions[0] == 1 and versions == sorted(set(versions))
    assert versions[-1] == SCHEMA_VERSION
    path = tmp_path / "m.db"
    with stalwart.Stalwart(f"sqlite:///{path}"):
        pass
    with stalwart.Stalwart(f"sqlite:///{path}"):  # opening again applies nothing twice
        pass
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT version FROM stalwart_schema").fetchall()
    assert rows == [(v,) for v in versions]
    conn.execute(
        "INSERT INTO stalwart_schema VALUES (?, ?)", (SCHEMA_VERSION + 2, SCHEMA_VERSION + 1)
    )
    conn.commit()
    conn.close()
    with pytest.raises(stalwart.StoreError, match="upgrade stalwart"):
        stalwart.Stalwart(f"sqlite:///{path}")


def test_large_payloads_are_stored_once_apart_from_the_journal(tmp_path: Path) -> None:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'p.db'}") as app:
        conversation = [{"role": "user", "content": "x" * 2000}]

        @app.step
        def llm(history: list[dict[str, str]]) -> str:
            return "ok"

        @app.workflow
        def agent() -> None:
            for _ in range(10):
                llm(conversation)

        app.run(agent, workflow_id="big")
        conn = raw_connection(store_of(app))
        assert conn.execute("SELECT count(*) FROM payloads").fetchone()[0] == 1
        widest = conn.execute("SELECT max(length(input)) FROM journal WHERE kind='step'")
        assert widest.fetchone()[0] <= 64  # a reference (a tree's root), not the 2 KB input
        entries = [e for e in app.journal("big") if e.kind == "step"]
        assert entries[0].input == {"args": [conversation], "kwargs": {}}
