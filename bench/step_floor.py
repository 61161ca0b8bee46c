"""The least CPython can spend on B: skeletons of a group-committing engine, beside stalwart.

B (issue 22) is 200 runs of 10 no-op steps on one worker with concurrency 200. Its floor in
``bench/group_commit.py`` is the same number of bare autocommitted INSERTs, one after the
other: the disk's floor. This bench measures the other floor, the interpreter's: what the
least engine of B's shape costs in CPython on this machine, in the same sitting as stalwart.

Each skeleton does, for every step, only what a durable step cannot skip: call the step's
function, encode its result as JSON, queue one journal row for the group commit and wait until
the transaction holding it has committed; a committer takes everything queued, writes it with
one ``executemany`` and commits. It writes into a journal table stalwart's migrations created,
with the same durability (SQLite, WAL, ``synchronous=NORMAL``). It keeps no run rows, no
leases, no replay, no fencing: everything it leaves out only adds cost, so its rate is an upper
bound for any engine of that shape.

- ``threads``: a thread per run, as a synchronous workflow needs (its function blocks in each
  step call); the committer is a thread of its own, and each step waits on its commit's event.
- ``asyncio``: a task per run and the committer on the same event loop (the shape an engine
  running only ``async def`` workflows could take).
- ``stalwart``: B itself, through ``bench/group_commit.py``'s worker (``process`` durability).

Each prints steps/s and the process's CPU per step (user + system); the ratios are to the
``threads`` skeleton.

    python bench/step_floor.py [--runs 200] [--steps 10] [--repeat 3]

It is a benchmark, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stalwart

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet import INSERT_SQLITE, journal_row  # noqa: E402  (a sibling script)
from group_commit import one_sample  # noqa: E402


def _noop() -> Any:
    """The step: no work, a JSON ``null`` result."""
    return None


def _connect(folder: str) -> sqlite3.Connection:
    """A fresh store (stalwart's migrations) and a connection to it as the skeletons write."""
    path = Path(folder) / f"skeleton-{time.monotonic_ns()}.db"
    stalwart.Stalwart(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _row(workflow_id: str, seq: int, result: Any) -> tuple[Any, ...]:
    row = journal_row(workflow_id, seq)
    return (*row[:10], json.dumps(result).encode(), *row[11:])


def _commit(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """One transaction holding ``rows``: the group commit."""
    conn.execute("BEGIN")
    conn.executemany(INSERT_SQLITE, rows)
    conn.execute("COMMIT")


def threads_skeleton(conn: sqlite3.Connection, runs: int, steps: int) -> float:
    """Seconds for ``runs`` threads of ``steps`` steps each, one committer thread."""
    pending: list[tuple[tuple[Any, ...], threading.Event]] = []
    ready = threading.Condition()
    done = threading.Event()

    def committer() -> None:
        while True:
            with ready:
                while not pending and not done.is_set():
                    ready.wait()
                if not pending:
                    return
                batch = pending[:]
                pending.clear()
            _commit(conn, [row for row, _ in batch])
            for _, committed in batch:
                committed.set()

    def run(index: int) -> None:
        workflow_id = f"t{index}"
        for seq in range(1, steps + 1):
            committed = threading.Event()
            with ready:
                pending.append((_row(workflow_id, seq, _noop()), committed))
                ready.notify()
            committed.wait()

    leader = threading.Thread(target=committer)
    leader.start()
    workers = [threading.Thread(target=run, args=(i,)) for i in range(runs)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    took = time.perf_counter() - start
    with ready:
        done.set()
        ready.notify()
    leader.join()
    return took


def asyncio_skeleton(conn: sqlite3.Connection, runs: int, steps: int) -> float:
    """Seconds for ``runs`` tasks of ``steps`` steps each, the committer on the same loop."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        pending: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
        wake = asyncio.Event()
        finished = False

        async def committer() -> None:
            while True:
                await wake.wait()
                wake.clear()
                if not pending:
                    if finished:
                        return
                    continue
                batch = pending[:]
                pending.clear()
                _commit(conn, [row for row, _ in batch])
                for _, committed in batch:
                    committed.set_result(None)

        async def run(index: int) -> None:
            workflow_id = f"a{index}"
            for seq in range(1, steps + 1):
                committed: asyncio.Future[None] = loop.create_future()
                pending.append((_row(workflow_id, seq, _noop()), committed))
                wake.set()
                await committed

        leader = asyncio.create_task(committer())
        start = time.perf_counter()
        await asyncio.gather(*(run(i) for i in range(runs)))
        took = time.perf_counter() - start
        finished = True
        wake.set()
        await leader
        return took

    return asyncio.run(main())


def measured(
    skeleton: Callable[[sqlite3.Connection, int, int], float], folder: str, runs: int, steps: int
) -> tuple[float, float]:
    """A skeleton's seconds on a fresh store and the CPU seconds this process spent meanwhile."""
    conn = _connect(folder)
    try:
        cpu = time.process_time()
        seconds = skeleton(conn, runs, steps)
        return seconds, time.process_time() - cpu
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="samples per figure; median (3)")
    args = parser.parse_args(argv)
    count = args.runs * args.steps
    figures: dict[str, list[tuple[float, float]]] = {"threads": [], "asyncio": [], "stalwart": []}
    with tempfile.TemporaryDirectory(prefix="stalwart-floor-") as folder:
        b_args = argparse.Namespace(
            runs=args.runs, steps=args.steps, concurrency=args.runs, postgres_url="",
            enqueue_first=False, use_async=False, threads=False,
        )  # fmt: skip
        for _ in range(args.repeat):
            for name, skeleton in (("threads", threads_skeleton), ("asyncio", asyncio_skeleton)):
                seconds, cpu = measured(skeleton, folder, args.runs, args.steps)
                figures[name].append((count / seconds, cpu / count * 1e6))
            rate, _floor, cpu_step = one_sample("sqlite", b_args, folder, starters=1)
            figures["stalwart"].append((rate, (cpu_step or 0.0) * 1e6))
    base = statistics.median(rate for rate, _ in figures["threads"])
    print(
        f"B's shape in CPython: {args.runs} runs x {args.steps} no-op steps, SQLite WAL "
        f"synchronous=NORMAL, median of {args.repeat}, load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print(f"{'engine':<10} {'steps/s':>10} {'CPU us/step':>12} {'ratio':>7}   samples")
    for name, samples in figures.items():
        rate = statistics.median(r for r, _ in samples)
        cpu_step = statistics.median(c for _, c in samples)
        listed = ", ".join(f"{r:,.0f}" for r, _ in samples)
        print(f"{name:<10} {rate:>10,.0f} {cpu_step:>12.1f} {rate / base:>6.2f}x   {listed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
