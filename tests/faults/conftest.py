"""Fixtures of the crash tests; the harness itself lives in ``fault_harness.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_harness import Harness, WorkerHarness

from store_urls import postgres_schema_url


@pytest.fixture(params=["sqlite", "postgres"])
def fault_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the crash tests share with their children: a SQLite file, or a PostgreSQL
    schema of their own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def agent(tmp_path: Path, fault_url: str) -> Iterator[Harness]:
    """Spawns agents on the store of ``fault_url``; kills leftover children at the end."""
    harness = Harness(tmp_path, fault_url)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def workers(tmp_path: Path, fault_url: str) -> Iterator[WorkerHarness]:
    """Starts ``worker_agent.py`` workers on the store of ``fault_url``; kills leftovers."""
    harness = WorkerHarness(tmp_path, fault_url)
    try:
        yield harness
    finally:
        harness.close()
