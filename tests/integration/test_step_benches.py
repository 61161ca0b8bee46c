"""bench/group_commit.py (sync and ``--async``), bench/step_floor.py, which borrows its
sampler, and bench/step_overhead.py with ``--async``, at a small size, so the benchmarks cannot
rot: they run and print their tables. Their figures are not checked here: timing claims live
in the benchmarks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.timeout(180)


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=160,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "shape", [[], ["--async", "--enqueue-first", "--threads"]], ids=["sync", "async"]
)
def test_the_group_commit_bench_runs_at_a_small_size(shape: list[str]) -> None:
    small = ["--runs", "20", "--steps", "2", "--repeat", "1", "--starters", "1"]
    out = _run("group_commit.py", *small, "--settings", "sqlite", *shape)
    assert "B = 20 runs x 2 no-op steps" in out, out
    assert ("(async def)" in out) == bool(shape), out
    assert "steps/s" in out and "CPU us/step" in out, out
    if sys.platform == "linux":
        assert ("the worker's threads, CPU a step" in out) == bool(shape), out


def test_the_step_floor_bench_runs_at_a_small_size() -> None:
    out = _run("step_floor.py", "--runs", "20", "--steps", "2", "--repeat", "1")
    for engine in ("threads", "asyncio", "stalwart"):
        assert engine in out, out


def test_the_step_overhead_bench_runs_async_at_a_small_size() -> None:
    out = _run("step_overhead.py", "--steps", "20", "--runs", "1", "--latency-runs", "2", "--async")
    assert "no-op async def steps per workflow" in out, out
    assert "process (NORMAL)" in out and "one-step app.run" in out, out
