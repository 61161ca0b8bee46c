"""The one read of bench/console_reads.py that its budget was missed by: a 1,000-entry run's
whole journal over HTTP (``GET /api/v1/runs/{id}/journal`` without ``limit``, 4.5 MB of JSON,
the LLM prompts stored as payload trees), on a smaller store seeded the same way.

The store is bench/console_seed.py's with ``--runs`` runs (default 6,000; the ten 1,000-entry
runs are there whatever the size, and so are their payload trees), seeded once. Then each code
tree given (``--code DIR``, a ``src`` folder; the default is this one's) serves it with
``stalwart ui`` in a subprocess, all of them at once, and the calls go to each in turn, ``--calls``
rounds after three warm-up rounds, so a code tree's figures and another's share the machine's
load. Printed per code tree and store: median and p95 (nearest rank) in ms, the ratio to the
floor measured in the same rounds (``GET /health``, an HTTP round trip) and to the first code
tree, the ``stalwart ui`` process's CPU time per call (which the load does not inflate; the
store server's is not in it), and the answer's size. With ``--profile``, this tree's own
time of the read, split into the store's rows with their payloads and the answer built from
them, in process.

    python bench/journal_read.py [--stores sqlite,postgres] [--calls 40]
                                 [--code /tmp/base/src --code src] [--profile]

PostgreSQL needs a reachable server (``--postgres-url``, default $STALWART_TEST_POSTGRES_URL or
postgresql://postgres@127.0.0.1:5432/test); its schema is dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from console_reads import ui_process
from console_seed import Rows, Seeded, Shape, drop_schema, seed_postgres, seed_sqlite

import stalwart

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
BUDGET_MS = 200.0
HERE = Path(__file__).resolve().parent.parent / "src"


def cpu_ms(pid: int) -> float:
    """The process's CPU time so far (user and system), in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(samples), ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def over_http(kind: str, url: str, seeded: Seeded, codes: list[Path], calls: int) -> None:
    import httpx

    path = f"/api/v1/runs/{seeded.big_id}/journal"
    with contextlib.ExitStack() as stack:
        clients, pids = [], []
        for code in codes:
            base, pid = stack.enter_context(ui_process(url, code))
            clients.append(stack.enter_context(httpx.Client(base_url=base, timeout=60)))
            pids.append(pid)
        # the same answer from every tree, byte for byte
        bodies = {client.get(path).raise_for_status().content for client in clients}
        if len(bodies) != 1:
            raise SystemExit(f"{kind}: the code trees answer differently")
        size = len(bodies.pop())
        journal: dict[int, list[float]] = {i: [] for i in range(len(clients))}
        cpu = dict.fromkeys(range(len(clients)), 0.0)  # the server's, over the measured calls
        health: list[float] = []
        for call in range(calls + 3):
            for i, client in enumerate(clients):
                began, used = time.perf_counter(), cpu_ms(pids[i])
                client.get(path).raise_for_status().json()
                took = (time.perf_counter() - began) * 1000
                if call >= 3:
                    journal[i].append(took)
                    cpu[i] += cpu_ms(pids[i]) - used
            began = time.perf_counter()
            clients[0].get("/api/v1/health").raise_for_status()
            if call >= 3:
                health.append((time.perf_counter() - began) * 1000)
    floor, _ = stats(health)
    first, _ = stats(journal[0])
    load = os.getloadavg()
    print(
        f"\n{kind}: GET /runs/ID/journal, 1,000-entry run, whole ({size / 2**20:.1f} MB), "
        f"{calls} rounds; floor GET /health median {floor:.2f} ms; "
        f"load average {load[0]:.1f} {load[1]:.1f}"
    )
    print(
        f"  {'code':<32} {'median ms':>10} {'p95 ms':>9} {'x floor':>8} {'x first':>8} "
        f"{'server CPU ms':>14}  budget"
    )
    for i, code in enumerate(codes):
        median, p95 = stats(journal[i])
        verdict = "MET" if p95 <= BUDGET_MS else "NOT MET"
        print(
            f"  {str(code)[-32:]:<32} {median:>10.1f} {p95:>9.1f} {median / floor:>8.0f} "
            f"{median / first:>8.2f} {cpu[i] / calls:>14.1f}  {verdict}"
        )


def profile(kind: str, url: str, seeded: Seeded, calls: int) -> None:
    """This tree's read in process: the store's rows, then the answer from them."""
    from stalwart import testing
    from stalwart._answers import _entry

    with stalwart.Stalwart(url) as app:
        store, codec = testing.store_of(app), testing.runtime_of(app).codec
        big = seeded.big_id
        rows_ms, answer_ms = [], []
        for call in range(calls + 3):
            began = time.perf_counter()
            rows = store.journal(big)
            middle = time.perf_counter()
            [_entry(codec, big, row) for row in rows]
            if call >= 3:
                rows_ms.append((middle - began) * 1000)
                answer_ms.append((time.perf_counter() - middle) * 1000)
    (rm, rp), (am, ap) = stats(rows_ms), stats(answer_ms)
    print(
        f"  {kind} in process (this tree): store.journal {rm:.1f} / {rp:.1f} ms, "
        f"the answer from its rows {am:.1f} / {ap:.1f} ms (median / p95)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per code tree")
    parser.add_argument("--code", action="append", type=Path, help="a src folder (repeatable)")
    parser.add_argument(
        "--runs", type=int, default=6_000, help="runs in the store (6,000 at least)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="time the store and the answer apart, in process"
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
    )
    args = parser.parse_args()
    if args.runs < 6_000:
        parser.error("--runs must be at least 6000: the seed's run with 200 children needs them")
    codes = [code.resolve() for code in args.code or [HERE]]
    # about eleven entries a run beside the ten long runs (the seed's children need 6,000 runs)
    shape = Shape(runs=args.runs, entries=args.runs * 11 + 10_000)
    made: list[Rows] = []

    def make(codec: Any) -> Rows:
        if not made:
            made.append(Rows(shape, codec, time.time()))
            made[0].seeded = made[0].generate()
        return made[0]

    stores = args.stores.split(",")

    def measure(kind: str, url: str, seeded: Seeded) -> None:
        over_http(kind, url, seeded, codes, args.calls)
        if args.profile:
            profile(kind, url, seeded, args.calls)

    if "sqlite" in stores:
        url, seeded = seed_sqlite(shape, make, False)
        measure("sqlite", url, seeded)
    if "postgres" in stores:
        url, schema, seeded = seed_postgres(args.postgres_url, make)
        try:
            measure("postgres", url, seeded)
        finally:
            drop_schema(args.postgres_url, schema)
    return 0


if __name__ == "__main__":
    sys.exit(main())
