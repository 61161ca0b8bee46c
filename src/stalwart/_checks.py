"""``app.check()``: replay the journal of every run in flight against the code this app
registers, executing nothing, before that code is deployed (docs/changing-code.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from . import _inputs
from ._engine.dryrun import CheckResult, dry_replay
from ._errors import WorkflowNotFound
from ._model import TERMINAL, RunStatus
from ._runtime import Runtime
from ._store import RunRow

__all__ = ["CheckResult", "Checks"]

LIVE = tuple(status.value for status in RunStatus if status not in TERMINAL)
_PAGE = 500


def _live_runs(runtime: Runtime) -> Iterator[RunRow]:
    """Every run that has not ended, status by status, newest first, page by page."""
    store = runtime.store
    for status in LIVE:
        before: float | None = None
        before_id: str | None = None
        while True:
            page = store.list_runs(
                status=status, name=None, limit=_PAGE, before=before, before_id=before_id
            )
            yield from page
            if len(page) < _PAGE:
                break
            before, before_id = page[-1].created_at, page[-1].workflow_id


def _named_runs(runtime: Runtime, workflow_ids: Iterable[str]) -> Iterator[RunRow]:
    for wid in workflow_ids:
        if not isinstance(wid, str):
            raise TypeError(f"workflow_ids: {wid!r} is not a workflow id (a str)")
        row = runtime.store.get_run(_inputs.name(wid, "workflow_ids"))
        if row is None:
            raise WorkflowNotFound(f"no run with workflow_id {wid!r} in {runtime.name}")
        if row.status not in TERMINAL:
            yield row


class Checks:
    """The ``check`` method of :class:`~stalwart.Stalwart`."""

    _runtime: Runtime

    def check(self, workflow_ids: Iterable[str] | None = None) -> list[CheckResult]:
        """Replay the journal of every run that has not ended (or of the runs named) against
        this app's code without executing any step, wait or side effect, and report each run:
        ``ok``, or ``diverged`` (where, what was recorded, what the code asks for now),
        ``stranded`` (its workflow is no longer registered) or ``corrupt``. Terminal runs are
        not listed. Takes no lease and writes nothing; ``stalwart check MODULE:APP`` is the
        same from the command line, exit 1 when any run is not ok."""
        if isinstance(workflow_ids, str):
            raise TypeError(
                f"workflow_ids={workflow_ids!r}: pass a list of workflow ids, or None for all"
            )
        runtime = self._runtime
        rows = _live_runs(runtime) if workflow_ids is None else _named_runs(runtime, workflow_ids)
        results = [dry_replay(runtime, row) for row in rows]
        return sorted(results, key=lambda r: r.workflow_id)
