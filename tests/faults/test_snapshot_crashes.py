"""A workspace snapshot survives its worker: a worker is SIGKILLed after its snapshot was
journaled, or in the middle of taking it, and another worker process restores the tree byte
for byte (modes, links and file times included), on SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_harness import WorkerHarness
from snapshot_agent import HANG_ENV, declare

import stalwart
from snapshot_trees import assert_same_tree, make_workspace

AGENT = Path(__file__).with_name("snapshot_agent.py")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def trees(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A workspace (removed by the test once the worker that took it is dead) and a copy of
    it to compare with."""
    outside = tmp_path / "outside"
    outside.mkdir()
    src = make_workspace(tmp_path / "ws", outside)
    expected = tmp_path / "expected"
    shutil.copytree(src, expected, symlinks=True)
    yield src, expected
    for folder in tmp_path.rglob("*"):
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(0o755)


def _remove(tree: Path) -> None:
    (tree / "locked").chmod(0o755)
    shutil.rmtree(tree)


def _restored_by_another_worker(
    workers: WorkerHarness, trees: tuple[Path, Path], hang: str, marker: Path
) -> stalwart.Stalwart:
    src, expected = trees
    first = workers.start(program=AGENT, concurrency=1, env={HANG_ENV: hang})
    app = stalwart.Stalwart(workers.url)
    try:
        flow = declare(app)
        handle = app.start(flow, str(src), "moved", workflow_id="mover")
        workers.wait_for(marker.exists, f"{hang} running", 60, [first])
        workers.kill(first)
        if hang == "bring_back":
            _remove(src)  # the tree exists only in the store now
        workers.start(program=AGENT, concurrency=1)
        target = handle.result(timeout=60)
        assert target == str(workers.workdir / "restored-moved")
        assert_same_tree(expected, Path(target))
        (snap,) = app.snapshots("mover")
        assert snap.files == 6
    except BaseException:
        print(workers.describe())
        app.close()
        raise
    return app


def test_a_journaled_snapshot_is_restored_after_its_worker_died(
    workers: WorkerHarness, trees: tuple[Path, Path]
) -> None:
    marker = workers.marker("mover", "bring_back")
    app = _restored_by_another_worker(workers, trees, "bring_back", marker)
    with app:
        takes = [e for e in workers.executions("mover") if e["step"] == "take"]
        assert len(takes) == 1  # the snapshot was not taken again


def test_a_snapshot_cut_short_by_a_crash_is_taken_again_whole(
    workers: WorkerHarness, trees: tuple[Path, Path]
) -> None:
    marker = workers.workdir / "running-take"
    app = _restored_by_another_worker(workers, trees, "take", marker)
    with app:
        takes = [e for e in workers.executions("mover") if e["step"] == "take"]
        assert [e["attempt"] for e in takes] == [1, 2]
