"""The chaos soak (issue 26 item 3): 4 workers over PostgreSQL, a mixed workload, random faults,
then the history checker. ``soak_driver`` says what it does, ``soak_checker`` what it checks.

It runs ``$STALWART_SOAK_SECONDS`` seconds of chaos (2 minutes by default, the form ``make test``
runs; ``make soak`` runs 10), prints the faults injected, the runs, the effects and the
violations (``-s`` shows them), and fails on any violation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from soak_driver import run_soak

from store_urls import postgres_schema_url

SECONDS = float(os.environ.get("STALWART_SOAK_SECONDS", "120"))
SETTLE_S = 240.0


@pytest.fixture
def soak_url() -> Iterator[str]:
    """A fresh schema of the test database (skipped without STALWART_TEST_POSTGRES_URL)."""
    yield from postgres_schema_url()


@pytest.mark.timeout(SECONDS + SETTLE_S + 180)
def test_chaos_soak(tmp_path: Path, soak_url: str) -> None:
    report = run_soak(soak_url, tmp_path, SECONDS, settle_timeout=SETTLE_S)
    summary = report.summary()
    print("\n" + summary)
    (tmp_path / "summary.txt").write_text(summary)
    assert not report.violations, summary
    assert sum(report.faults.values()) >= SECONDS / 8, f"too few faults injected\n{summary}"
    assert report.statuses["completed"] >= SECONDS, f"too little work done\n{summary}"
