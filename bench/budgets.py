"""What a budget costs a long run: per step, and per invocation when the run resumes.

A budget is checked before every step attempt against what the run has used so far. Three
figures, on each store:

1. Per step: a run of ``--steps`` no-op steps (each records 1 token in and out) executed by
   ``app.run`` in one invocation, with a budget (``max_tokens`` and ``max_steps`` too high to
   reach) and without (the best of five runs each, in wall-clock time and in this process's CPU
   time, which a shared machine disturbs far less); the floor is the run without. Target:
   ratio at most 1.05.
2. The spend read: what the engine reads once per invocation of a budgeted run (``Spend.of_run``)
   on that run of ``--steps`` steps, against the floor of one primary-key read of the run's row
   (``store.get_run``); the journal read it replaced (``Spend.of_journal``) beside it.
   Target: within a few times the floor, whatever the run's length.
3. Resume: the same run, then ``stalwart.wait_for_event("go")`` and one more step; the bench
   sends the event and the run's resumed invocation (replaying ``--steps`` steps, then the last
   one) is timed from the top of the workflow function to that last step, with a budget and
   without (the best of five runs each); the floor is the run without. Target: ratio at most
   1.05.

    python bench/budgets.py [--steps 10000] [--stores sqlite,postgres] [--postgres-url URL]

PostgreSQL needs a reachable server (``--postgres-url``, default $STALWART_TEST_POSTGRES_URL or
postgresql://postgres@127.0.0.1:5432/test); without one its rows are skipped with a note. It is
a benchmark, not a test: it exits 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from fleet import DEFAULT_POSTGRES_URL, Stores, postgres_version

import stalwart
from stalwart._engine.budget import Spend
from stalwart.testing import store_of

TARGET_STEP_RATIO = 1.05
TARGET_RESUME_RATIO = 1.05
LIMITLESS = stalwart.Budget(max_tokens=10**15, max_steps=10**12)
SAMPLES = 21  # reads of the spend, each timed on its own
RESUMES = 5  # resumed runs of each kind: the best counts
ROUNDS = 5  # runs of each kind for the per-step figure, interleaved: the best counts
marks: dict[str, float] = {}


def define(app: stalwart.Stalwart) -> dict[str, Any]:
    """The bench's workflows on ``app``: the same agent with a budget and without."""

    @app.step(name="work")
    def work(i: int) -> int:
        stalwart.record_usage(input_tokens=1, output_tokens=1)
        return i

    @app.step(name="last")
    def last() -> None:
        marks["last"] = time.perf_counter()

    def agent(steps: int, wait: bool) -> int:
        marks["top"] = time.perf_counter()
        for i in range(steps):
            work(i)
        if wait:
            stalwart.wait_for_event("go")
            last()
        return steps

    @app.workflow(name="free")
    def free(steps: int, wait: bool) -> int:
        return agent(steps, wait)

    @app.workflow(name="capped", budget=LIMITLESS)
    def capped(steps: int, wait: bool) -> int:
        return agent(steps, wait)

    return {"free": free, "capped": capped}


def per_step(app: stalwart.Stalwart, flows: dict[str, Any], steps: int) -> dict[str, float]:
    """µs per step of one invocation of ``steps`` steps, with a budget and without (the best
    of ``ROUNDS`` runs each, interleaved), in wall-clock time and in this process's CPU time
    (``cpu-free``, ``cpu-capped``: where the budget's checks run, and on a shared machine far
    steadier than the wall clock)."""
    best: dict[str, float] = {}
    for round_ in range(ROUNDS):
        # each kind goes first every other round: a later run meets a bigger store
        for kind in ("free", "capped") if round_ % 2 == 0 else ("capped", "free"):
            start, cpu = time.perf_counter(), time.process_time()
            app.run(flows[kind], steps, False, workflow_id=f"{kind}-steps-{round_}")
            elapsed = (time.perf_counter() - start) * 1e6 / steps
            used = (time.process_time() - cpu) * 1e6 / steps
            best[kind] = min(best.get(kind, elapsed), elapsed)
            best[f"cpu-{kind}"] = min(best.get(f"cpu-{kind}", used), used)
    return best


def spend_read(app: stalwart.Stalwart, workflow_id: str) -> dict[str, float]:
    """Median µs of the spend read, the journal read it replaced, and one row's read."""
    runtime: Any = app._runtime
    store = store_of(app)
    of_journal = getattr(Spend, "of_journal", Spend.of_run)  # before the totals: the same
    reads: dict[str, Callable[[], object]] = {
        "floor": lambda: store.get_run(workflow_id),
        "totals": lambda: Spend.of_run(runtime, workflow_id, LIMITLESS),
        "journal": lambda: of_journal(runtime, workflow_id, LIMITLESS),
    }
    times: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(SAMPLES):
        for name, read in reads.items():
            start = time.perf_counter()
            read()
            times[name].append((time.perf_counter() - start) * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


def resume(
    app: stalwart.Stalwart, flows: dict[str, Any], steps: int, kind: str, round_: int
) -> float:
    """Seconds of the resumed invocation of a ``steps``-step run that waited on an event."""
    workflow_id = f"{kind}-resume-{round_}"
    done: list[Any] = []
    runner = threading.Thread(
        target=lambda: done.append(app.run(flows[kind], steps, True, workflow_id=workflow_id))
    )
    runner.start()
    store = store_of(app)
    while (row := store.get_run(workflow_id)) is None or row.status != "suspended":
        time.sleep(0.01)
    app.send_event(workflow_id, "go", None)
    runner.join()
    if done != [steps]:
        raise SystemExit(f"run {workflow_id} did not complete: {done}")
    return marks["last"] - marks["top"]


def bench_store(url: str, label: str, steps: int) -> None:
    """Every figure on the store at ``url``."""
    with stalwart.Stalwart(url) as app:
        flows = define(app)
        step_us = per_step(app, flows, steps)
        ratio = step_us["capped"] / step_us["free"]
        cpu_ratio = step_us["cpu-capped"] / step_us["cpu-free"]
        print(
            f"{label:<11}per step, {steps:,} steps: {step_us['capped']:.1f} µs with a budget, "
            f"floor (without) {step_us['free']:.1f} µs, ratio {ratio:.2f}; CPU of this "
            f"process {step_us['cpu-capped']:.1f} µs against {step_us['cpu-free']:.1f} µs, "
            f"ratio {cpu_ratio:.2f} (target <= {TARGET_STEP_RATIO})",
            flush=True,
        )
        read = spend_read(app, "capped-steps-0")
        print(
            f"{'':<11}spend read at {steps:,} steps: {read['totals']:.0f} µs, floor (one row) "
            f"{read['floor']:.0f} µs, ratio {read['totals'] / read['floor']:.1f}; the journal "
            f"read {read['journal']:,.0f} µs ({read['journal'] / read['floor']:,.0f}x)",
            flush=True,
        )
        seconds: dict[str, float] = {}
        for round_ in range(RESUMES):  # the best of each, each kind first every other round
            for kind in ("free", "capped") if round_ % 2 == 0 else ("capped", "free"):
                took = resume(app, flows, steps, kind, round_)
                seconds[kind] = min(seconds.get(kind, took), took)
        ratio = seconds["capped"] / seconds["free"]
        print(
            f"{'':<11}resume after {steps:,} steps: {seconds['capped'] * 1e3:.0f} ms with a "
            f"budget, floor (without) {seconds['free'] * 1e3:.0f} ms, ratio {ratio:.2f} "
            f"(target <= {TARGET_RESUME_RATIO})",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=10_000, help="steps of the long run")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    print(
        f"stalwart {stalwart.__version__} budgets: a run of {args.steps:,} steps, Python "
        f"{sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-") as folder:
        for kind in args.stores.split(","):
            if kind == "postgres":
                version = postgres_version(args.postgres_url)
                if version is None:
                    continue
                label = "postgres"
            else:
                label = "sqlite"
            stores = Stores(kind, folder, args.postgres_url)
            try:
                bench_store(stores.fresh(), label, args.steps)
            finally:
                stores.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
