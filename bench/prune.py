"""Prune beside a worker claiming runs: the store of bench/console_seed.py (100,000 runs and
1,000,000 journal entries, mostly ended, over six weeks) pruned whole, on SQLite and on
PostgreSQL.

Figures, per store:

* the prune: how many runs it deleted and in how long (runs a second and journal entries a
  second), then the collector: payload rows deleted and in how long;
* the claims of a worker meanwhile: another process (a connection of its own, as a worker is)
  starts a run and claims it (``claim_candidates`` then ``take_lease``, timed), one every
  ``--every`` ms; the longest claim and the 99th percentile while the prune runs, beside the
  same on the idle store measured just before in the same sitting, their difference against the
  goal (the longest claim no more than 50 ms longer than without the prune) and their ratio.

    python bench/prune.py [--stores sqlite,postgres] [--runs N --entries N] [--every 5]
                          [--postgres-url URL] [--baseline-seconds 8]

SQLite's seeded file is copied from bench/.cache (bench/console_seed.py seeds it once);
PostgreSQL gets a fresh schema, dropped after. ``--runs 2000 --entries 20000`` is a quick
smoke run. It is a benchmark, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from console_seed import Rows, Shape, drop_schema, seed_postgres, seed_sqlite

import stalwart
from stalwart import testing
from stalwart._prune import collect, prune_runs
from stalwart._store.prunes import PruneFilter

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
GOAL_MS = 50.0


# -- the claiming worker (a process of its own) -------------------------------------------------


def claimer(url: str, phase_file: Path, every: float) -> None:
    """Start a run and claim it, one every ``every`` seconds, until ``phase_file`` says stop;
    print each claim's phase and milliseconds as JSON lines at the end."""
    app = stalwart.Stalwart(url)

    @app.workflow(name="live")
    def live(i: int) -> int:
        return i

    store = testing.store_of(app)
    owner = f"bench-claimer-{os.getpid()}:1"
    out: list[tuple[str, float]] = []
    i = 0
    phase = "baseline"
    while True:
        phase = phase_file.read_text().strip() or phase  # caught while it was rewritten
        if phase == "stop":
            break
        app.start(live, i, workflow_id=f"live-{os.getpid()}-{i}")
        began = time.perf_counter()
        now = time.time()
        found = store.claim_candidates(names=["live"], queues=["default"], now=now, limit=1)
        for row in found:
            store.take_lease(
                row.workflow_id,
                owner=owner,
                expected_owner=row.lease_owner,
                now=now,
                lease_until=now + 600,
            )
        out.append((phase, (time.perf_counter() - began) * 1000))
        i += 1
        time.sleep(every)
    app.close()
    for phase, ms in out:
        print(json.dumps([phase, ms]))


# -- the bench ----------------------------------------------------------------------------------


def _longest_per(values: list[float], size: int) -> float:
    """The median of the longest claim of each ``size`` claims in a row: the longest of many
    claims is longer than the longest of few by chance alone, so the prune's claims are taken
    in groups as large as the idle store's sample before they are compared with it."""
    if not values or size < 1:
        return 0.0
    groups = [values[i : i + size] for i in range(0, len(values) - size + 1, size)]
    return statistics.median(max(g) for g in groups) if groups else max(values)


def _stats(values: list[float]) -> tuple[float, float, int]:
    if not values:
        return 0.0, 0.0, 0
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return ordered[-1], p99, len(ordered)


def measure(kind: str, url: str, args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-prune-"))
    phase = workdir / "phase"
    phase.write_text("baseline")
    child = subprocess.Popen(
        [sys.executable, __file__, "--claimer", url, str(phase), str(args.every / 1000)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with stalwart.Stalwart(url) as app:
            runtime = app._runtime
            store = runtime.store
            where = PruneFilter(before=time.time() - 60)
            prunable = store.count_prunable(where)
            time.sleep(args.baseline_seconds)
            phase.write_text("prune")
            began = time.perf_counter()
            deleted = prune_runs(runtime, where)
            pruned_in = time.perf_counter() - began
            phase.write_text("collect")
            began = time.perf_counter()
            payloads, chunks = collect(runtime)
            collected_in = time.perf_counter() - began
            phase.write_text("stop")
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    claims: dict[str, list[float]] = {"baseline": [], "prune": [], "collect": []}
    for line in out.splitlines():
        name, ms = json.loads(line)
        claims[name].append(ms)
    entries = args.entries * deleted / max(1, args.runs)
    print(
        f"{kind}: pruned {deleted:,} of {prunable:,} prunable runs in {pruned_in:.1f} s "
        f"({deleted / pruned_in:,.0f} runs/s, about {entries / pruned_in:,.0f} journal "
        f"entries/s); collected {payloads:,} payload rows and {chunks} snapshot chunks in "
        f"{collected_in:.1f} s"
    )
    base_max, base_p99, base_n = _stats(claims["baseline"])
    for part in ("prune", "collect"):
        most, p99, n = _stats(claims[part])
        typical = _longest_per(claims[part], base_n)
        print(
            f"{kind}: claims during the {part} alone: longest {most:.1f} ms "
            f"({most - base_max:+.1f} ms), p99 {p99:.1f} ms ({n} claims); the longest of "
            f"every {base_n} in a row (as many as the idle store's): median {typical:.1f} ms "
            f"({typical - base_max:+.1f} ms, ratio {typical / max(base_max, 1e-9):.2f}x)"
        )
    claims["prune"] += claims["collect"]
    prune_max, prune_p99, prune_n = _stats(claims["prune"])
    extra = prune_max - base_max
    print(
        f"{kind}: claims, idle store: longest {base_max:.1f} ms, p99 {base_p99:.1f} ms "
        f"({base_n} claims); during the prune and collection: longest {prune_max:.1f} ms, "
        f"p99 {prune_p99:.1f} ms ({prune_n} claims); longest {extra:+.1f} ms "
        f"(goal <= +{GOAL_MS:.0f} ms: {'met' if extra <= GOAL_MS else 'missed'}), "
        f"ratio {prune_max / max(base_max, 1e-9):.2f}x, median "
        f"{statistics.median(claims['prune'] or [0]):.1f} ms vs "
        f"{statistics.median(claims['baseline'] or [0]):.1f} ms"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--claimer":
        claimer(sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=Shape.runs)
    parser.add_argument("--entries", type=int, default=Shape.entries)
    parser.add_argument("--every", type=float, default=5.0, help="ms between claims")
    parser.add_argument("--baseline-seconds", type=float, default=8.0)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
    )
    args = parser.parse_args()
    shape = Shape(runs=args.runs, entries=args.entries)
    made: list[Rows] = []

    def make(codec: Any) -> Rows:
        if not made:
            made.append(Rows(shape, codec, time.time()))
            made[0].seeded = made[0].generate()
        return made[0]

    stores = args.stores.split(",")
    if "sqlite" in stores:
        cached, _seeded = seed_sqlite(shape, make, reseed=False)
        copy = Path(tempfile.mkdtemp(prefix="bench-prune-db-")) / "store.db"
        shutil.copyfile(cached[len("sqlite:///") :], copy)
        try:
            measure("sqlite", f"sqlite:///{copy}", args)
        finally:
            shutil.rmtree(copy.parent, ignore_errors=True)
    if "postgres" in stores:
        url, schema, _seeded = seed_postgres(args.postgres_url, make)
        try:
            measure("postgres", url, args)
        finally:
            drop_schema(args.postgres_url, schema)
    return 0


if __name__ == "__main__":
    sys.exit(main())
