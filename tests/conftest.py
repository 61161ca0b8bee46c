"""Shared fixtures: every store-backed test runs on each backend.

The ``postgres`` backend runs when ``STALWART_TEST_POSTGRES_URL`` names a database (``.ci/run``
sets it); each test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart import testing
from stalwart.testing import FakeClock
from store_urls import postgres_schema_url

BACKENDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL for each backend."""
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stalwart.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store several connections and processes can share (a memory store cannot)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def clock() -> FakeClock:
    """A clock that jumps forward instead of sleeping."""
    return FakeClock()


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[stalwart.Stalwart]:
    """An app on a fresh store of each backend, with a fake clock."""
    with stalwart.Stalwart(store_url, clock=clock) as instance:
        yield instance


def execute_sql(
    app: stalwart.Stalwart, sql: str, params: dict[str, Any] | None = None
) -> list[Any]:
    """Run raw SQL (``:name`` placeholders) on the app's store, whatever its backend."""
    return testing.execute_sql(testing.store_of(app), sql, params)


@pytest.fixture
def raw_sql() -> Callable[..., list[Any]]:
    """:func:`execute_sql`, for tests that inspect or damage what a store holds."""
    return execute_sql
