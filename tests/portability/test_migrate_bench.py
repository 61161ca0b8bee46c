"""bench/migrate.py at a small size (5,000 runs), so the benchmark cannot rot: it runs, prints
every figure, and its copy verifies. Its figures are not checked here: timing claims live in
the benchmark (docs/performance.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store_urls import NO_POSTGRES, POSTGRES_URL

BENCH = Path(__file__).resolve().parents[2] / "bench" / "migrate.py"

pytestmark = pytest.mark.timeout(120)


@pytest.mark.skipif(not POSTGRES_URL, reason=NO_POSTGRES)
def test_the_migrate_bench_runs_at_a_small_size(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--runs",
            "5000",
            "--entries",
            "50000",
            "--cache",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
        env={**os.environ, "STALWART_TEST_POSTGRES_URL": str(POSTGRES_URL)},
    )
    assert done.returncode in (0, 1), done.stderr  # 1: the goal missed, on a loaded machine
    for figure in ("baseline", "migrate (copy_store)", "ratio", "verified: True"):
        assert figure in done.stdout, done.stdout + done.stderr
