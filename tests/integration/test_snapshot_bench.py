"""bench/snapshots.py at a small size (six files, SQLite), so the benchmark cannot rot: it
runs, prints every figure, and leaves nothing under /tmp. Its figures are not checked here:
timing claims live in the benchmark (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "snapshots.py"

pytestmark = pytest.mark.timeout(120)


def test_the_snapshot_bench_runs_at_a_small_size() -> None:
    before = set(Path("/tmp").glob("stalwart-bench-snapshots-*"))
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--files",
            "6",
            "--file-bytes",
            "300000",
            "--stores",
            "sqlite",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for figure in ("first snapshot", "restore", "second snapshot", "other writers", "peak RSS"):
        assert figure in done.stdout, done.stdout
    assert set(Path("/tmp").glob("stalwart-bench-snapshots-*")) <= before
