"""Workspace snapshots on every backend: a tree survives byte for byte (modes, links, times),
chunks are shared across snapshots and runs, the size-and-mtime rule skips unchanged files,
and restore checks every digest and never writes outside its target."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from snapshot_trees import assert_same_tree, make_workspace
from stalwart.testing import store_of

pytestmark = pytest.mark.timeout(120)

Sql = Callable[..., list[Any]]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace that no restore may touch."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "keep.txt").write_text("untouched\n")
    return folder


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Iterator[Path]:
    root = make_workspace(tmp_path / "ws", outside)
    yield root
    for folder, _dirs, _files in os.walk(tmp_path):  # let pytest delete read-only folders
        os.chmod(folder, 0o755)


def snapshot_flow(app: stalwart.Stalwart) -> Any:
    @app.step(name="take")
    def take(path: str, name: str, exclude: list[str]) -> stalwart.SnapshotRef:
        return stalwart.snapshot(path, name=name, exclude=exclude)

    @app.workflow(name="snap")
    def snap(
        path: str, name: str = "workspace", exclude: list[str] | None = None
    ) -> stalwart.SnapshotRef:
        return take(path, name, exclude or [])

    return snap


def test_a_tree_comes_back_byte_for_byte(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path, outside: Path
) -> None:
    ref = app.run(snapshot_flow(app), str(workspace), workflow_id="w1")
    assert isinstance(ref, stalwart.SnapshotRef)
    assert (ref.name, ref.files) == ("workspace", 6)
    assert ref.bytes == sum(
        p.stat().st_size for p in workspace.rglob("*") if p.is_file() and not p.is_symlink()
    )
    assert 0 < ref.stored_bytes < ref.bytes
    assert app.snapshots("w1") == [ref]
    app.restore(ref, tmp_path / "copy")
    assert_same_tree(workspace, tmp_path / "copy")
    assert os.readlink(tmp_path / "copy" / "outside-link") == str(outside)
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    empty = tmp_path / "empty-target"
    empty.mkdir()
    app.restore(ref, empty)  # an empty folder is taken too
    assert_same_tree(workspace, empty)


def test_chunks_are_shared_across_snapshots_and_runs(
    app: stalwart.Stalwart, workspace: Path
) -> None:
    snap = snapshot_flow(app)
    first = app.run(snap, str(workspace), workflow_id="a")
    again = app.run(snap, str(workspace), workflow_id="b")  # another run: nothing new
    assert again.stored_bytes == 0 and again.bytes == first.bytes
    (workspace / "src" / "main.py").write_text("print('changed')\n" * 500)
    third = app.run(snap, str(workspace), workflow_id="c")
    assert 0 < third.stored_bytes < 10_000  # only the changed file's chunk


def test_an_unchanged_size_and_mtime_is_taken_from_the_previous_snapshot(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path
) -> None:
    @app.step(name="take")
    def take(path: str) -> stalwart.SnapshotRef:
        return stalwart.snapshot(path)

    @app.step(name="edit")
    def edit(path: str) -> None:
        target = Path(path) / "src" / "main.py"
        st = target.stat()
        target.write_text("PRINT('HELLO')\n" * 500)  # same size
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same time

    @app.workflow(name="twice")
    def twice(path: str) -> list[stalwart.SnapshotRef]:
        first = take(path)
        edit(path)
        return [first, take(path)]

    first, second = app.run(twice, str(workspace), workflow_id="t")
    assert second.stored_bytes == 0  # the edited file was not read again
    app.restore(second, tmp_path / "back")
    assert (tmp_path / "back" / "src" / "main.py").read_text().startswith("print('hello')")
    assert [s.id for s in app.snapshots("t")] == [first.id, second.id]


def test_exclude_skips_matching_paths_at_any_depth(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path
) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref: main\n")
    (workspace / "src" / "pkg" / "mod.pyc").write_bytes(b"\0" * 100)
    ref = app.run(snapshot_flow(app), str(workspace), "ws", [".git", "*.pyc", "src/main.py"])
    app.restore(ref, tmp_path / "back")
    restored = tmp_path / "back"
    assert not (restored / ".git").exists()
    assert not (restored / "src" / "pkg" / "mod.pyc").exists()
    assert not (restored / "src" / "main.py").exists()
    assert (restored / "src" / "pkg" / "__init__.py").exists()


def test_what_a_snapshot_cannot_hold_is_refused(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path
) -> None:
    os.mkfifo(workspace / "pipe")
    snap = snapshot_flow(app)
    with pytest.raises(stalwart.WorkflowFailed, match="pipe.*exclude="):
        app.run(snap, str(workspace), workflow_id="fifo")
    with pytest.raises(stalwart.WorkflowFailed, match="not a folder"):
        app.run(snap, str(workspace / "run.sh"), workflow_id="file")
    outside = r"^stalwart\.snapshot\(\) was called outside a run; call it inside a step$"
    with pytest.raises(stalwart.InvalidOperation, match=outside):
        stalwart.snapshot(workspace)
    os.remove(workspace / "pipe")
    (Path(os.fsdecode(bytes(workspace)) + os.fsdecode(b"/caf\xe9"))).write_text("x")
    with pytest.raises(stalwart.WorkflowFailed, match="not valid UTF-8.*exclude it"):
        app.run(snap, str(workspace), workflow_id="latin1")
    assert app.run(snap, str(workspace), "ws", ["caf*"], workflow_id="excluded").files == 6

    @app.workflow(name="in_workflow")
    def in_workflow(path: str) -> Any:
        return stalwart.snapshot(path)

    with pytest.raises(stalwart.WorkflowFailed, match="called in workflow code; call it inside"):
        app.run(in_workflow, str(workspace))


def test_restore_refuses_a_folder_that_is_not_empty(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path
) -> None:
    ref = app.run(snapshot_flow(app), str(workspace), "ws", [".", "locked"])
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(ValueError, match="not an empty folder"):
        app.restore(ref, busy)
    with pytest.raises(ValueError, match="does not exist"):
        app.restore(ref, tmp_path / "no" / "such" / "dir")
    with pytest.raises(ValueError, match="pass the SnapshotRef"):
        app.restore("nope", tmp_path / "x")  # type: ignore[arg-type]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_damaged_chunk_raises_corrupt_record_and_leaves_nothing(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path, raw_sql: Sql
) -> None:
    ref = app.run(snapshot_flow(app), str(workspace), workflow_id="d")
    out = tmp_path / "restores"
    out.mkdir()
    (digest,) = raw_sql(app, "SELECT digest FROM snapshot_chunks ORDER BY size DESC LIMIT 1")[0]
    other = raw_sql(app, "SELECT data FROM snapshot_chunks ORDER BY size LIMIT 1")[0][0]
    raw_sql(
        app,
        "UPDATE snapshot_chunks SET data = :data WHERE digest = :digest",
        {"data": bytes(other), "digest": bytes(digest)},
    )
    with pytest.raises(stalwart.CorruptRecord, match="does not match its digest"):
        app.restore(ref, out / "copy")
    raw_sql(
        app,
        "UPDATE snapshot_chunks SET data = :data WHERE digest = :digest",
        {"data": b"garbage", "digest": bytes(digest)},
    )
    with pytest.raises(stalwart.CorruptRecord, match="cannot be decompressed"):
        app.restore(ref, out / "copy")
    assert _leftovers(out) == []


def test_restore_never_writes_outside_its_target(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path, outside: Path, raw_sql: Sql
) -> None:
    """Entries planted in the store that would leave the target (a path with ``..``, an
    absolute one, a file under a link pointing outside) are refused."""
    ref = app.run(snapshot_flow(app), str(workspace), workflow_id="e")
    planted = {"snapshot_id": ref.id, "kind": "file", "mode": 0o644, "size": 0, "mtime_ns": 0}
    insert = (
        "INSERT INTO snapshot_files (snapshot_id, path, kind, mode, size, mtime_ns, chunks) "
        "VALUES (:snapshot_id, :path, :kind, :mode, :size, :mtime_ns, :chunks)"
    )
    out = tmp_path / "restores"
    out.mkdir()
    before = sorted(p.name for p in outside.iterdir())
    for path in ("../escape.txt", "outside-link/planted.txt", "/abs.txt", "src/../../up.txt"):
        raw_sql(app, insert, {**planted, "path": path, "chunks": b""})
        with pytest.raises(stalwart.CorruptRecord, match=f"entry {path!r}"):
            app.restore(ref, out / "copy")
        raw_sql(app, "DELETE FROM snapshot_files WHERE path = :path", {"path": path})
        assert _leftovers(out) == []
        assert sorted(p.name for p in outside.iterdir()) == before
    assert not (tmp_path / "escape.txt").exists()
    assert not Path("/abs.txt").exists()


def test_a_snapshot_of_a_deleted_run_cannot_be_restored(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path, raw_sql: Sql
) -> None:
    ref = app.run(snapshot_flow(app), str(workspace), workflow_id="gone")
    store = store_of(app)
    assert store.drop_snapshots("gone") == 1
    raw_sql(app, "DELETE FROM journal WHERE workflow_id = 'gone'")
    raw_sql(app, "DELETE FROM run_spend WHERE workflow_id = 'gone'")
    raw_sql(app, "DELETE FROM runs WHERE workflow_id = 'gone'")
    with pytest.raises(stalwart.InvalidOperation, match="run 'gone'"):
        app.restore(ref, tmp_path / "back")
    assert raw_sql(app, "SELECT count(*) FROM snapshot_files")[0][0] == 0
    assert raw_sql(app, "SELECT count(*) FROM snapshot_uses")[0][0] == 0
    with pytest.raises(stalwart.WorkflowNotFound):
        app.snapshots("gone")


def test_a_step_restores_what_an_earlier_step_took(
    app: stalwart.Stalwart, workspace: Path, tmp_path: Path
) -> None:
    @app.step(name="take")
    def take(path: str) -> stalwart.SnapshotRef:
        return stalwart.snapshot(path)

    @app.step(name="bring_back")
    def bring_back(ref: Any, path: str) -> int:  # a ref without annotation: a dict
        stalwart.restore(ref, path)
        return len(os.listdir(path))

    @app.workflow(name="move")
    def move(src: str, dst: str) -> int:
        return bring_back(take(src), dst)

    assert app.run(move, str(workspace), str(tmp_path / "moved")) == len(os.listdir(workspace))
    assert_same_tree(workspace, tmp_path / "moved")
    with pytest.raises(stalwart.InvalidOperation, match="app.restore"):
        stalwart.restore({"id": "x@y"}, tmp_path / "z")
    shutil.rmtree(tmp_path / "moved", ignore_errors=True)


def test_a_big_snapshot_on_sqlite_keeps_the_write_ahead_log_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread copies the log while chunks are written, draining it every DRAIN_BYTES (made
    small here); afterwards the store's connection checkpoints at commit again."""
    from stalwart._store import checkpoints

    monkeypatch.setattr(checkpoints, "DRAIN_BYTES", 2 * 1024 * 1024)
    tree = tmp_path / "big"
    tree.mkdir()
    for i in range(12):
        (tree / f"part{i}.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    wal = tmp_path / "store.db-wal"
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.001):
            with contextlib.suppress(FileNotFoundError):
                peak[0] = max(peak[0], wal.stat().st_size)

    watcher = threading.Thread(target=watch)
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'store.db'}") as app:
        watcher.start()
        try:
            ref = app.run(snapshot_flow(app), str(tree), workflow_id="big")
        finally:
            done.set()
            watcher.join()
        assert ref.files == 12 and ref.stored_bytes > 24_000_000
        assert peak[0] < 20 * 1024 * 1024  # drained as it grew: never the 24 MB written
        store = store_of(app)
        pages = store._run(lambda conn: conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        assert pages == 1000
        assert wal.stat().st_size < 8 * 1024 * 1024  # truncated once the snapshot ended
        app.restore(ref, tmp_path / "back")
    assert_same_tree(tree, tmp_path / "back")
