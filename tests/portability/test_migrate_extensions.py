"""``stalwart migrate`` copies the integrations' tables (the extension port's, docs/
extension-port.md): a known integration's tables are created in the target by its own
migrations, numbered columns go on past the copied rows; an unknown namespace is refused until
the target has its tables."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from cli_process import stalwart as cli
from stalwart._extension import ExtensionStore, Migration
from store_urls import postgres_schema_url

pytestmark = pytest.mark.timeout(120)

NOTES = [
    Migration(
        1,
        sqlite="CREATE TABLE ext_notes_items (key TEXT PRIMARY KEY, body BLOB NOT NULL)",
        postgres="CREATE TABLE ext_notes_items (key TEXT PRIMARY KEY, body BYTEA NOT NULL)",
    )
]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema."""
    yield from postgres_schema_url()


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


def test_a_known_integrations_tables_are_created_and_copied(tmp_path: Path, pg_url: str) -> None:
    from stalwart.integrations.openai_agents import StalwartSession

    source = f"sqlite:///{tmp_path / 'source.db'}"
    with stalwart.Stalwart(source) as app:
        session = StalwartSession("chat-1", app=app)
        asyncio.run(session.add_items([_user("one"), _user("two")]))
    done = cli("--url", source, "migrate", "--to", pg_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ext_openai_agents_items" in done.stdout
    with stalwart.Stalwart(pg_url) as app:
        session = StalwartSession("chat-1", app=app)
        asyncio.run(session.add_items([_user("three")]))  # numbered after the copied rows
        items = asyncio.run(session.get_items())
    assert [item["content"] for item in items] == ["one", "two", "three"]  # type: ignore[index]


def test_an_unknown_namespace_needs_its_tables_in_the_target(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    target = f"sqlite:///{tmp_path / 'target.db'}"
    with stalwart.Stalwart(source) as app:
        ExtensionStore(app, "notes", NOTES).execute(
            "INSERT INTO ext_notes_items (key, body) VALUES (:k, :b)", {"k": "a", "b": b"\x00hi"}
        )
    refused = cli("--url", source, "migrate", "--to", target, cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith(
        "error: the store holds the tables of integration 'notes', which migrate does not know"
    )
    with stalwart.Stalwart(target) as app:
        ExtensionStore(app, "notes", NOTES)
    done = cli("--url", source, "migrate", "--to", target, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with stalwart.Stalwart(target) as app:
        rows = ExtensionStore(app, "notes", NOTES).fetchall("SELECT key, body FROM ext_notes_items")
    assert rows == [("a", b"\x00hi")]
