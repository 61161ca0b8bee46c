"""Restart: a worker is SIGKILLed holding 50 runs; a new worker finishes them all.

Each run does a no-op step, then a step that hangs in the first worker (it waits for the kill)
and runs at once in the second, then a no-op step. The first worker (this file in worker
mode, concurrency 50) takes the 50 runs; once every run is inside its hanging step, it is
SIGKILLed, and a second worker process starts. The figure is the time from the second
worker's start, after its interpreter started and imported stalwart (and psycopg, for
PostgreSQL), the moment it begins to open the store (``stalwart.Stalwart(url)``), to the
``updated_at`` of the last run to complete; the time from its ``app.serve()`` call is
printed too. Each figure is the median of ``--repeat`` samples, each on a fresh store.

The floor is the same number of bare transactions (runs: 50 autocommitted INSERTs of one
journal row, one after the other on one connection) on a store stalwart's migrations created,
with stalwart's durability settings, measured in the same sitting.

    python bench/restart.py [--runs 50] [--repeat 3] [--stores sqlite,postgres]
                            [--postgres-url URL]

It is a benchmark, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet import DEFAULT_POSTGRES_URL, postgres_version  # noqa: E402
from group_commit import drop, floor_rate, fresh_url  # noqa: E402

import stalwart  # noqa: E402

TARGET_S = 0.300
READY_TIMEOUT_S = 60.0


def build(url: str, hang_dir: str | None) -> tuple[stalwart.Stalwart, Any]:
    """The app and its workflow; with ``hang_dir`` the middle step marks itself there and
    sleeps until the process is killed."""
    app = stalwart.Stalwart(url)

    @app.step(name="rs_before")
    def before() -> None:
        return None

    @app.step(name="rs_middle")
    def middle(wid: str) -> None:
        if hang_dir is not None:
            Path(hang_dir, wid).touch()
            time.sleep(3600)

    @app.step(name="rs_after")
    def after() -> None:
        return None

    @app.workflow(name="rs_chain")
    def chain(wid: str) -> str:
        before()
        middle(wid)
        after()
        return wid

    return app, chain


def serve(url: str, concurrency: int, hang_dir: str | None, stamp: str) -> int:
    """Worker mode: serve until killed or SIGTERM; ``stamp`` gets the start times."""
    if url.startswith("postgresql"):
        import psycopg_pool  # noqa: F401  (imports are the interpreter's start, not the worker's)
    began = time.time()
    app, _ = build(url, hang_dir)
    Path(stamp).write_text(f"{began} {time.time()}", "ascii")
    try:
        app.serve(concurrency=concurrency)
    finally:
        app.close()
    return 0


def worker(url: str, runs: int, hang_dir: str | None, stamp: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, __file__, "--worker", url, "--concurrency", str(runs)]
    cmd += ["--stamp", str(stamp)] + (["--hang", hang_dir] if hang_dir else [])
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait(condition: Any, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the worker exited before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.01)


def one_sample(kind: str, runs: int, folder: str, postgres_url: str) -> tuple[float, float, float]:
    """Seconds from the new worker's start and from its serve() to the last run done; the
    floor's seconds."""
    setting = "postgres" if kind == "postgres" else "sqlite"
    floor_url = fresh_url(setting, folder, postgres_url)
    build(floor_url, None)[0].close()
    try:
        floor = runs / floor_rate(setting, floor_url, postgres_url, runs)
    finally:
        drop(floor_url, postgres_url)

    url = fresh_url(setting, folder, postgres_url)
    app, chain = build(url, None)
    hang = Path(folder, f"hang-{uuid.uuid4().hex[:6]}")
    hang.mkdir()
    first_stamp, second_stamp = hang / "first.stamp", hang / "second.stamp"
    first = worker(url, runs, str(hang), first_stamp)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait(first_stamp.exists, "the first worker started", first)
        for i in range(runs):
            app.start(chain, f"r-{i:03d}", workflow_id=f"r-{i:03d}")
        wait(lambda: len(list(hang.glob("r-*"))) >= runs, "every run hangs", first)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        second = worker(url, runs, None, second_stamp)
        wait(
            lambda: len(app.list_workflows(status="completed", limit=runs)) >= runs,
            "every run done",
            second,
        )
        done = app.list_workflows(status="completed", limit=runs)
        last = max(info.updated_at.timestamp() for info in done)
        began, serving = (float(x) for x in second_stamp.read_text().split())
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait()
        app.close()
        drop(url, postgres_url)
    print(
        f"  {kind}: {last - began:.3f} s from the new worker's start "
        f"({last - serving:.3f} s from serve()); floor {floor:.3f} s",
        flush=True,
    )
    return last - began, last - serving, floor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs the killed worker holds (50)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="samples per store; the median is shown (3)"
    )
    parser.add_argument(
        "--stores",
        default="sqlite,postgres",
        help="comma-separated, any of: sqlite, postgres (default: both)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="a libpq URL of a database where the bench may create and drop schemas "
        f"(default: $STALWART_TEST_POSTGRES_URL, else {DEFAULT_POSTGRES_URL})",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--hang", help=argparse.SUPPRESS)
    parser.add_argument("--stamp", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.worker, args.concurrency, args.hang, args.stamp)

    kinds = [name.strip() for name in args.stores.split(",") if name.strip()]
    if "postgres" in kinds and postgres_version(args.postgres_url) is None:
        kinds.remove("postgres")
    rows = []
    with tempfile.TemporaryDirectory(prefix="stalwart-restart-") as folder:
        for kind in kinds:
            samples = [
                one_sample(kind, args.runs, folder, args.postgres_url) for _ in range(args.repeat)
            ]
            rows.append((kind, *(statistics.median(s[k] for s in samples) for k in range(3))))
    print(f"\n{args.runs} interrupted runs, a new worker; medians of {args.repeat}")
    print(f"{'store':<10} {'from start':>11} {'from serve':>11} {'floor':>8} {'ratio':>7}")
    for kind, total, serving, floor in rows:
        print(
            f"{kind:<10} {total:>10.3f}s {serving:>10.3f}s {floor:>7.3f}s {total / floor:>6.1f}x"
            f"   (target {TARGET_S:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
