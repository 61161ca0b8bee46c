"""Store URLs for tests: a PostgreSQL schema of each test's own, when a server is configured."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

POSTGRES_URL = os.environ.get("STALWART_TEST_POSTGRES_URL")
NO_POSTGRES = "set STALWART_TEST_POSTGRES_URL to run the PostgreSQL backend"


def postgres_schema_url() -> Iterator[str]:
    """A URL naming a fresh schema of the test database; the schema is dropped afterwards."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    separator = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{separator}schema={schema}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
