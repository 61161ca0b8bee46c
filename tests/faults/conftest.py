"""Fixtures of the crash tests; the harness itself lives in ``fault_harness.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_harness import Harness, WorkerHarness


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Harness]:
    """Spawns agents on a SQLite file in ``tmp_path``; kills leftover children at the end."""
    harness = Harness(tmp_path)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerHarness]:
    """Starts ``worker_agent.py`` workers on a SQLite file in ``tmp_path``; kills leftovers."""
    harness = WorkerHarness(tmp_path)
    try:
        yield harness
    finally:
        harness.close()
