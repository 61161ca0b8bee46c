"""What the portability tests share: a seeded store, its rows, a worker process of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from portable_agent import declare, seed

import stalwart
from stalwart import testing
from stalwart._store.portable.access import Bulk
from stalwart._store.portable.tables import COPIED

HERE = Path(__file__).parent


def seeded(url: str, folder: Path) -> None:
    folder.mkdir()
    with stalwart.Stalwart(url) as app:
        declare(app)
        seed(app, folder)
        # The worker thread has stopped: the store's workers are gone.
        testing.execute_sql(testing.store_of(app), "DELETE FROM workers")


def contents(url: str, *, renumbered: bool = False) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table's rows, by the columns both backends have, sorted (``renumbered``:
    without the numbers a store gives, which an import gives anew, nor the time a payload row
    was last written, which an import writes anew)."""
    with stalwart.Stalwart(url) as app:
        bulk = Bulk(testing.store_of(app))
        out: dict[str, list[tuple[Any, ...]]] = {}
        for entry in COPIED:
            # snapshot_chunks' id is SQLite's alone
            columns = sorted(
                c for c in bulk.columns(entry.name) if c != "id" or entry.key == ("id",)
            )
            if renumbered:
                columns = [c for c in columns if c not in ("id", "budget_entry", "touched_at")]
            if not columns:
                continue
            rows = [r for page in bulk.pages(entry.name, columns, ()) for r in page]
            out[entry.name] = sorted((tuple(_same(v) for v in r) for r in rows), key=repr)
        return out


def _same(value: Any) -> Any:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def start_worker(url: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "STALWART_URL": url, "PYTHONPATH": f"{HERE}{os.pathsep}{cwd}"}
    return subprocess.Popen(
        [sys.executable, "-m", "stalwart", "worker", "portable_worker:app"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGTERM)
    return worker.communicate(timeout=30)[0]


def resumes_on_a_worker(url: str, cwd: Path) -> None:
    """The migrated suspended run completes on a worker process of ``url``; the approval
    too."""
    worker = start_worker(url, cwd)
    try:
        with stalwart.Stalwart(url) as app:
            app.send_event("talk-1", "go", "now")
            app.approve("ask-1", by="tester")
            assert app.handle("talk-1").result(timeout=60) == f"{len(words(400))}:now"
            assert app.handle("ask-1").result(timeout=60) == "approved"
    finally:
        output = stop(worker)
    assert worker.returncode == 0, output


def words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n))
