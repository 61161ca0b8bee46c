"""bench/encryption.py at a small size (SQLite), so the benchmark cannot rot: it runs and
prints its figures. Its figures are not checked here: timing claims live in the benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "encryption.py"

pytestmark = pytest.mark.timeout(120)


def test_the_encryption_bench_runs_at_a_small_size() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "20", "--chat-steps", "10", "--stores", "sqlite"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for figure in ("small payloads", "a conversation", "ratio"):
        assert figure in done.stdout, done.stdout
