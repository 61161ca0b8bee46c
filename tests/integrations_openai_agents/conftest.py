"""Fixtures of the OpenAI Agents SDK tests: the SDK's tracing is off (it would call the
network), and the crash tests reuse the worker harness of ``tests/faults``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import agents
import pytest

FAULTS = Path(__file__).resolve().parents[1] / "faults"
if str(FAULTS) not in sys.path:
    sys.path.append(str(FAULTS))  # fault_harness, worker_main (and their children's PYTHONPATH)

from fault_harness import WorkerHarness  # noqa: E402

agents.set_tracing_disabled(True)


@pytest.fixture
def oa_workers(tmp_path: Path, shared_url: str) -> Iterator[WorkerHarness]:
    """Starts ``oa_worker.py`` workers on the store of ``shared_url``; kills leftovers."""
    harness = WorkerHarness(tmp_path, shared_url)
    try:
        yield harness
    finally:
        harness.close()
