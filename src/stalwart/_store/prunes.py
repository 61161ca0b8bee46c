"""The prune role of the store: deleting ended runs with everything kept for them, and
collecting the content-addressed rows no run uses any more.

``prune_runs`` deletes a batch of runs and, in the same transaction, every row kept for them
(journal, events, approvals, usage totals and calls, snapshots with their entries and use
rows, stream chunks): a prune interrupted anywhere leaves each run whole or gone, and running
it again finishes the job. The precondition (ended, last changed before the cutoff, no child still
under way) is read again in the ``WHERE`` clause of the delete. Content-addressed rows are not
deleted with a run, since other runs may share them: ``collect_payloads`` and
``collect_chunks`` delete what nothing references, safely beside live writers (``garbage``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .garbage import GRACE_SECONDS

__all__ = ["TERMINAL", "PruneFilter", "PruneStore"]

TERMINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class PruneFilter:
    """Which runs a prune selects: ended ones last changed before ``before`` (epoch seconds),
    of ``status`` and ``name`` when given, of no workflow named in ``exclude``."""

    before: float
    status: str | None = None
    name: str | None = None
    exclude: tuple[str, ...] = ()


class PruneStore(Protocol):
    """Deleting ended runs and collecting unused content-addressed rows."""

    last_held: float  # how long the last prune_runs transaction held the store, in seconds

    def prunable_runs(self, where: PruneFilter, *, limit: int) -> list[str]:
        """Up to ``limit`` ids of runs ``where`` selects, oldest change first."""

    def count_prunable(self, where: PruneFilter) -> int:
        """How many runs ``where`` selects now."""

    def prune_runs(self, ids: Sequence[str], where: PruneFilter) -> list[str]:
        """Delete the runs among ``ids`` that ``where`` still selects, with every row kept for
        them, in one transaction; the ids deleted."""

    def collect_payloads(
        self, *, now: float, grace: float = GRACE_SECONDS, batch: int | None = None
    ) -> int:
        """Delete payload rows no column references and no writer touched within ``grace``
        seconds, at most ``batch`` a transaction (the backend's own when ``None``); how
        many."""

    def release_space(self) -> None:
        """Give the space that deletes freed back to the file system where the backend can
        (SQLite created with incremental vacuum), in short steps."""

    def collect_chunks(
        self, *, now: float, grace: float = GRACE_SECONDS, batch: int | None = None
    ) -> int:
        """Delete snapshot chunks no snapshot uses, stored more than ``grace`` seconds ago, at
        most ``batch`` a transaction; how many."""
