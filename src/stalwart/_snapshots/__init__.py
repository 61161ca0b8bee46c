"""Workspace snapshots (docs/snapshots.md): ``stalwart.snapshot`` stores a directory tree in
the app's store as content-defined, deduplicated, compressed chunks; ``stalwart.restore``
(``app.restore``) recreates it on any worker, checking every chunk's digest."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._engine.invocation import CURRENT_RUN, CURRENT_STEP
from .._errors import InvalidOperation, WorkflowNotFound
from .._model import SnapshotRef
from .._runtime import Runtime
from .._store.snapshots import SnapshotRow
from .restoring import restore_tree
from .taking import take

__all__ = ["Snapshots", "restore", "restore_with", "snapshot", "snapshots_of"]


def _step_runtime(call: str) -> tuple[Runtime, str]:
    scope = CURRENT_STEP.get()
    if scope is None:
        where = "in workflow code" if CURRENT_RUN.get() is not None else "outside a run"
        hint = "" if call == "snapshot" else "; outside a step use app.restore(ref, path)"
        raise InvalidOperation(f"stalwart.{call}() was called {where}; call it inside a step{hint}")
    return scope.invocation.runtime, scope.invocation.workflow_id


def _patterns(exclude: Sequence[str]) -> tuple[str, ...]:
    if isinstance(exclude, str) or not all(isinstance(p, str) and p for p in exclude):
        raise ValueError(
            f"snapshot(exclude={exclude!r}): pass a list of glob patterns, e.g. "
            '[".git", "node_modules", "*.pyc"]'
        )
    return tuple(exclude)


def snapshot(
    path: str | os.PathLike[str], *, name: str = "workspace", exclude: Sequence[str] = ()
) -> SnapshotRef:
    """Store the directory tree at ``path`` in the app's store (inside a step) and return
    its reference: files cut into content-defined chunks, each stored once per store,
    zstd-compressed. ``exclude`` takes glob patterns relative to ``path``; a file whose
    size and modification time equal those in this run's previous snapshot of ``name`` is
    taken from it without being read."""
    runtime, workflow_id = _step_runtime("snapshot")
    if not isinstance(name, str) or not name:
        raise ValueError(f"snapshot(name={name!r}): pass a non-empty str, e.g. 'workspace'")
    return take(
        runtime.store,
        workflow_id=workflow_id,
        root=os.fspath(path),
        name=name,
        exclude=_patterns(exclude),
        now=runtime.clock.time,
    )


def _snapshot_id(ref: Any) -> str:
    if isinstance(ref, SnapshotRef):
        return ref.id
    if isinstance(ref, Mapping) and isinstance(ref.get("id"), str):
        return str(ref["id"])  # a SnapshotRef as a step without a return annotation gives it
    raise ValueError(f"restore({ref!r}, ...): pass the SnapshotRef stalwart.snapshot() returned")


def restore_with(runtime: Runtime, ref: SnapshotRef | Mapping[str, Any], path: str) -> None:
    """Recreate the snapshot ``ref`` at ``path`` from ``runtime``'s store."""
    snapshot_id = _snapshot_id(ref)
    store = runtime.store
    row = store.get_snapshot(snapshot_id)
    if row is None or not row.complete:
        run = snapshot_id.partition("@")[2]
        if run and store.get_run(run) is None:
            raise InvalidOperation(
                f"snapshot {snapshot_id!r} belonged to run {run!r}, which was deleted with its "
                "snapshots; take a new snapshot"
            )
        raise InvalidOperation(
            f"snapshot {snapshot_id!r} is not in the store {runtime.name}; restore it from the "
            "store that took it"
        )
    restore_tree(store, row, os.fspath(path))


def restore(ref: SnapshotRef | Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Recreate the snapshot ``ref`` at ``path`` (missing or empty) inside a step, checking
    every chunk's digest; outside a step use ``app.restore``."""
    runtime, _ = _step_runtime("restore")
    restore_with(runtime, ref, os.fspath(path))


def _ref(row: SnapshotRow) -> SnapshotRef:
    return SnapshotRef(
        id=row.id,
        name=row.name,
        files=row.files,
        bytes=row.bytes,
        stored_bytes=row.stored_bytes,
        created_at=_dt.datetime.fromtimestamp(row.created_at, _dt.UTC),
    )


def snapshots_of(runtime: Runtime, workflow_id: str) -> list[SnapshotRef]:
    """A run's snapshots, oldest first."""
    return [_ref(row) for row in runtime.store.run_snapshots(workflow_id)]


class Snapshots:
    """The snapshot methods of :class:`~stalwart.Stalwart`, for code outside runs."""

    _runtime: Runtime

    def restore(self, ref: SnapshotRef | Mapping[str, Any], path: str | os.PathLike[str]) -> None:
        """Recreate the snapshot ``ref`` at ``path`` (missing or an empty folder), checking
        every chunk's digest; ``InvalidOperation`` when its run was deleted."""
        restore_with(self._runtime, ref, os.fspath(path))

    def snapshots(self, workflow_id: str) -> list[SnapshotRef]:
        """The snapshots run ``workflow_id`` took, oldest first."""
        if self._runtime.store.get_run(workflow_id) is None:
            raise WorkflowNotFound(
                f"no run with workflow_id {workflow_id!r} in {self._runtime.name}"
            )
        return snapshots_of(self._runtime, workflow_id)
