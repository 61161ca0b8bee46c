"""A store's schema as it is on disk, read without opening the store with stalwart (which
would migrate it)."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import parse_qs, urlsplit

from store_urls import POSTGRES_URL

ROWS = "SELECT version, oldest_compatible FROM stalwart_schema ORDER BY version"


def _query(url: str, sql: str) -> list[Any]:
    """``sql``'s rows on the store at ``url`` (tables named without their schema)."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute(sql).fetchall()
        conn.close()
        return rows
    import psycopg

    (schema,) = parse_qs(urlsplit(url).query)["schema"]
    assert POSTGRES_URL is not None
    with psycopg.connect(POSTGRES_URL) as pg:
        pg.execute(f"SET search_path TO {schema}")
        return pg.execute(sql).fetchall()


def versions(url: str) -> list[tuple[int, int]]:
    """The store's ``stalwart_schema`` rows: (version, oldest_compatible), in order."""
    return [(int(v), int(o)) for v, o in _query(url, ROWS)]


def has_table(url: str, name: str) -> bool:
    """Whether the store holds a table ``name``."""
    if url.startswith("sqlite:///"):
        found = _query(url, f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{name}'")
    else:
        found = _query(
            url,
            f"SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = '{name}'",
        )
    return bool(found)


def indexes(url: str) -> dict[str, str]:
    """The store's indexes, each by name with its definition (on PostgreSQL without the
    schema's name, so that two schemas compare)."""
    if url.startswith("sqlite:///"):
        rows = _query(url, "SELECT name, sql FROM sqlite_master WHERE type = 'index'")
        return {str(name): str(sql) for name, sql in rows}
    rows = _query(
        url,
        "SELECT indexname, replace(indexdef, current_schema() || '.', '') FROM pg_indexes "
        "WHERE schemaname = current_schema()",
    )
    return {str(name): str(sql) for name, sql in rows}
