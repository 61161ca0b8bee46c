"""Shared fixtures: every store-backed test runs on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import stalwart
from stalwart.testing import FakeClock

BACKENDS = ["memory", "sqlite"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL for each backend."""
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'stalwart.db'}"


@pytest.fixture
def clock() -> FakeClock:
    """A clock that jumps forward instead of sleeping."""
    return FakeClock()


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[stalwart.Stalwart]:
    """An app on a fresh store of each backend, with a fake clock."""
    with stalwart.Stalwart(store_url, clock=clock) as instance:
        yield instance
