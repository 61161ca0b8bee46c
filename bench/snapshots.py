"""Workspace snapshots: 1 GiB in 1,000 files, taken, restored and taken again after 1% of the
files changed, on SQLite (the goals) and PostgreSQL (printed beside).

The tree is written under /tmp and deleted at the end: 1,000 files of 1 MiB (1,073,741 bytes
each), half hexadecimal text (zstd keeps about 55% of it, like source code and lock files),
half random bytes (incompressible, like wheels, git packs and compiled libraries).

Figures, each from one sample on a fresh store:

* first snapshot and restore throughput, MB/s of file bytes (goal >= 200 MB/s each on SQLite),
  beside the floor measured in the same sitting: a bare copy of the tree (``shutil.copytree``
  reading and writing the same bytes, page cache warm), and their ratio (figure / floor); for
  the SQLite snapshot also the store's own floor: SQLite writing as many bytes as the snapshot
  stored (1 MiB blobs, 6 MiB a transaction) and nothing else, as MB/s of the tree's bytes;
* a second snapshot by the same run after 1% of the files (10) were rewritten: what it stored
  against the first (goal <= 2%) and its time against the first's (goal <= 20%), which the
  size-and-modification-time rule allows: the 990 unchanged files are not read again;
* the peak resident memory the process gained while taking and while restoring (goal <= 64 MB),
  from /proc/self/status VmHWM after resetting it (/proc/self/clear_refs);
* how long other writers wait meanwhile: another app on the same store (a connection of its
  own) starts a run every 20 ms during the first snapshot; the longest and the 99th percentile
  of those starts, beside the same starts on the idle store (the snapshot writes its chunks in
  batches of at most 6 MiB, each its own transaction).

    python bench/snapshots.py [--files 1000] [--file-bytes 1073741] [--stores sqlite,postgres]
                              [--postgres-url URL]

It is a benchmark, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet import DEFAULT_POSTGRES_URL, Stores  # noqa: E402

import stalwart  # noqa: E402

GOAL_MBPS = 200.0
GOAL_STORED = 0.02
GOAL_TIME = 0.20
GOAL_RSS_MB = 64.0
CHANGED = 0.01


def write_tree(root: Path, files: int, size: int) -> int:
    """The bench's tree; its total bytes."""
    for i in range(files):
        folder = root / f"pkg{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size // 2).hex().encode() if i % 2 == 0 else os.urandom(size)
        (folder / f"file{i:04d}.dat").write_bytes(data[:size])
    return files * size


def change_some(root: Path, share: float) -> int:
    """Rewrite ``share`` of the files with new bytes (a later modification time); how many."""
    paths = sorted(root.rglob("*.dat"))
    step = max(1, round(1 / share))
    changed = paths[::step]
    for path in changed:
        size = path.stat().st_size
        path.write_bytes(os.urandom(size))
    return len(changed)


def rss_reset() -> int:
    """Reset the process's peak RSS to its current RSS; the current RSS in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def rss_peak() -> int:
    return _status("VmHWM")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def declare(app: stalwart.Stalwart) -> Any:
    """One run takes the tree, rewrites 1% of its files, and takes it again; each snapshot
    step reports its time and the peak RSS the process gained while it ran."""

    @app.step(name="take")
    def take(path: str) -> dict[str, Any]:
        base = rss_reset()
        started = time.perf_counter()
        ref = stalwart.snapshot(path)
        return {"ref": ref, "seconds": time.perf_counter() - started, "rss": rss_peak() - base}

    @app.step(name="change")
    def change(path: str) -> int:
        return change_some(Path(path), CHANGED)

    @app.workflow(name="bench_snapshots")
    def bench_snapshots(path: str) -> list[dict[str, Any]]:
        first = take(path)
        change(path)
        return [first, take(path)]

    return bench_snapshots


def sqlite_floor(stored: int, scratch: Path) -> float:
    """Seconds SQLite takes to write ``stored`` bytes of 1 MiB blobs in transactions of 6 MiB
    on a file with the store's settings (WAL, synchronous NORMAL): the writes a snapshot that
    stores ``stored`` compressed bytes cannot avoid."""
    import hashlib
    import sqlite3

    path = scratch / "floor.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, digest BLOB UNIQUE, data BLOB)")
    blob = os.urandom(2**20)
    started = time.perf_counter()
    for i in range(stored // 2**20):
        if i % 6 == 0:
            conn.execute("BEGIN IMMEDIATE")
        digest = hashlib.sha256(i.to_bytes(8, "big")).digest()
        conn.execute("INSERT INTO blobs (digest, data) VALUES (?, ?)", (digest, blob))
        if i % 6 == 5:
            conn.execute("COMMIT")
    if conn.in_transaction:
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    for leftover in scratch.glob("floor.db*"):
        leftover.unlink()
    return elapsed


def copy_floor(tree: Path, scratch: Path) -> float:
    """Seconds a bare copy of the tree takes (read and write, page cache warm)."""
    target = scratch / "floor-copy"
    started = time.perf_counter()
    shutil.copytree(tree, target)
    elapsed = time.perf_counter() - started
    shutil.rmtree(target)
    return elapsed


class Prober:
    """Starts a run every 20 ms on its own app until stopped; the latency of each start."""

    def __init__(self, url: str) -> None:
        self.app = stalwart.Stalwart(url)

        @self.app.workflow(name="bench_probe")
        def probe() -> None:
            return None

        self.flow = probe
        self.latencies: list[float] = []
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else None
        self.wal = None if path is None else Path(path + "-wal")
        self.wal_peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            started = time.perf_counter()
            self.app.start(self.flow)
            self.latencies.append(time.perf_counter() - started)
            if self.wal is not None and self.wal.exists():
                self.wal_peak = max(self.wal_peak, self.wal.stat().st_size)

    def __enter__(self) -> Prober:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def figures(self) -> tuple[float, float]:
        """The longest start and the 99th percentile, in ms; then forget them."""
        got = sorted(self.latencies) or [0.0]
        self.latencies = []
        p99 = statistics.quantiles(got, n=100)[98] if len(got) > 1 else got[-1]
        return got[-1] * 1000, min(p99, got[-1]) * 1000


def measure(url: str, tree: Path, total: int, scratch: Path) -> dict[str, float]:
    with stalwart.Stalwart(url) as app:
        prober = Prober(url)
        with prober:
            time.sleep(2.0)
        idle_max, idle_p99 = prober.figures()
        with prober:
            first, second = app.run(declare(app), str(tree), workflow_id="bench")
        busy_max, busy_p99 = prober.figures()
        wal_peak = prober.wal_peak
        prober.app.close()
        ref = stalwart.SnapshotRef(**first["ref"])
        target = scratch / "restored"
        base = rss_reset()
        started = time.perf_counter()
        app.restore(ref, target)
        restore_s = time.perf_counter() - started
        restore_rss = rss_peak() - base
        shutil.rmtree(target)
    return {
        "total": total,
        "take_mbps": total / first["seconds"] / 1e6,
        "restore_mbps": total / restore_s / 1e6,
        "first_s": first["seconds"],
        "second_s": second["seconds"],
        "stored": first["ref"]["stored_bytes"],
        "stored_again": second["ref"]["stored_bytes"],
        "take_rss": first["rss"] / 2**20,
        "restore_rss": restore_rss / 2**20,
        "idle_max": idle_max,
        "idle_p99": idle_p99,
        "busy_max": busy_max,
        "busy_p99": busy_p99,
        "wal_peak": wal_peak / 1e6,
    }


def report(kind: str, fig: dict[str, float], floor_mbps: float, scratch: Path) -> None:
    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    goal = kind == "sqlite"
    print(f"\n{kind}")
    for label, key in (("first snapshot", "take_mbps"), ("restore", "restore_mbps")):
        value = fig[key]
        verdict = f"  goal >= {GOAL_MBPS:.0f} MB/s: {met(value >= GOAL_MBPS)}" if goal else ""
        print(
            f"  {label:<16} {value:7.0f} MB/s   floor (bare copy) {floor_mbps:6.0f} MB/s   "
            f"ratio {value / floor_mbps:5.2f}{verdict}"
        )
    if kind == "sqlite":
        floor = fig["total"] / sqlite_floor(int(fig["stored"]), scratch) / 1e6
        print(
            f"  {'':<16} {fig['take_mbps']:7.0f} MB/s   floor (SQLite writing the "
            f"{fig['stored'] / 1e6:.0f} MB it stored, nothing else) {floor:6.0f} MB/s   "
            f"ratio {fig['take_mbps'] / floor:5.2f}"
        )
    share = fig["stored_again"] / max(fig["stored"], 1)
    time_share = fig["second_s"] / fig["first_s"]
    print(
        f"  second snapshot  stored {fig['stored_again'] / 1e6:7.2f} MB of the first's "
        f"{fig['stored'] / 1e6:.0f} MB = {share:6.2%}"
        + (f"  goal <= {GOAL_STORED:.0%}: {met(share <= GOAL_STORED)}" if goal else "")
    )
    print(
        f"                   took {fig['second_s']:.2f} s of the first's {fig['first_s']:.2f} s "
        f"= {time_share:6.2%}"
        + (f"  goal <= {GOAL_TIME:.0%}: {met(time_share <= GOAL_TIME)}" if goal else "")
    )
    print(
        f"  other writers    a start took at most {fig['busy_max']:6.1f} ms (p99 "
        f"{fig['busy_p99']:5.1f} ms) during the snapshot, {fig['idle_max']:5.1f} ms (p99 "
        f"{fig['idle_p99']:4.1f} ms) on the idle store"
    )
    if kind == "sqlite":
        print(f"  write-ahead log  at most {fig['wal_peak']:6.1f} MB during the snapshot")
    for label, key in (("taking", "take_rss"), ("restoring", "restore_rss")):
        value = fig[key]
        print(
            f"  peak RSS growth  {label:<10} {value:6.1f} MB"
            + (f"  goal <= {GOAL_RSS_MB:.0f} MB: {met(value <= GOAL_RSS_MB)}" if goal else "")
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--file-bytes", type=int, default=1_073_741)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    opts = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="stalwart-bench-snapshots-", dir="/tmp"))
    try:
        total = opts.files * opts.file_bytes
        print(
            f"snapshots: {opts.files} files, {total / 2**30:.2f} GiB (half hex text, half "
            f"random bytes), under {scratch}"
        )
        for kind in opts.stores.split(","):
            tree = scratch / "tree"
            write_tree(tree, opts.files, opts.file_bytes)
            floor_mbps = total / copy_floor(tree, scratch) / 1e6
            stores = Stores(kind, str(scratch), opts.postgres_url)
            try:
                report(kind, measure(stores.fresh(), tree, total, scratch), floor_mbps, scratch)
            finally:
                stores.drop()
                shutil.rmtree(tree)
                for store in scratch.glob("store-*"):
                    shutil.rmtree(store)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
