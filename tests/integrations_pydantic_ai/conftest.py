"""Fixtures of the pydantic-ai integration tests. The crash tests reuse the worker harness of
``tests/faults`` (its folder is put on ``sys.path`` here, and so reaches the worker processes
through the harness's ``PYTHONPATH``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stalwart

FAULTS = Path(__file__).resolve().parents[1] / "faults"
if str(FAULTS) not in sys.path:
    sys.path.insert(0, str(FAULTS))

from fault_harness import WorkerHarness  # noqa: E402

from store_urls import postgres_schema_url  # noqa: E402

WORKER = Path(__file__).with_name("pydantic_ai_worker.py")


@pytest.fixture(params=["sqlite", "postgres"])
def agent_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the tests share with their worker processes."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def agent_workers(tmp_path: Path, agent_url: str) -> Iterator[WorkerHarness]:
    """Starts ``pydantic_ai_worker.py`` workers (``start(program=WORKER, ...)``); kills
    leftovers at the end."""
    harness = WorkerHarness(tmp_path, agent_url)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def agent_app(agent_workers: WorkerHarness) -> Iterator[stalwart.Stalwart]:
    """An app on the workers' store in the test process, declaring their workflows (to start
    runs and read results; it never executes them)."""
    from crash_agent import Recorder
    from pydantic_ai_worker import declare

    with stalwart.Stalwart(agent_workers.url) as app:
        declare(app, Recorder(agent_workers.workdir, []))
        yield app
