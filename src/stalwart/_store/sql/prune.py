"""Prune and garbage collection over SQL (see ``stalwart._store.prunes``): a batch of ended
runs deleted with every row kept for them in one transaction; payload rows and snapshot chunks
no run uses any more collected in short transactions of their own."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..._keyring import SEALED_TAG
from ..garbage import GRACE_SECONDS, Graph, batches, referenced_by
from ..prunes import PruneFilter
from ._base import SQLBase

__all__ = ["PruneVerbs"]

# What deleting a run deletes with it, in the order the statements run.
_DEPENDENTS = (
    "delete_journal",
    "delete_events",
    "delete_approvals",
    "delete_run_spend",
    "delete_run_calls",
    "delete_run_spend_steps",
    "delete_snapshot_uses",
    "delete_snapshot_files",
    "delete_snapshots",
    "delete_stream_chunks",
)


class PruneVerbs(SQLBase):
    """The ``PruneStore`` verbs over SQL."""

    _collect_batch = 500  # rows the collector deletes a transaction
    # How long the last prune_runs transaction held the store, from its first statement to its
    # end (not the wait for SQLite's write lock before it): what the next batch is sized by.
    last_held = 0.0

    # -- what a backend may refine ----------------------------------------------------

    def _reading(self, work: Callable[[Any], Any]) -> Any:
        """Run a long read (the collector's mark) where it delays no writer of this process
        (SQLite: a connection of its own)."""
        return self._run(work)

    def _reclaim(self) -> bool:
        """One step of giving the space freed by deletes back (SQLite: an incremental vacuum
        step); whether there may be more to give."""
        return False

    def _touched(self, conn: Any, digests: list[bytes]) -> dict[bytes, float | None]:
        """When each row of ``digests`` still stored was last touched, read in the deleting
        transaction (``payload_touched``: on PostgreSQL locked)."""
        found: dict[bytes, float | None] = {}
        for digest in digests:
            row = conn.execute(self._q["payload_touched"], {"digest": digest}).fetchone()
            if row is not None:
                found[digest] = row[0]
        return found

    def _delete_payloads(self, conn: Any, digests: list[bytes]) -> None:
        """Delete the payload rows ``digests``."""
        for digest in digests:
            conn.execute(self._q["delete_payload"], {"digest": digest})

    def release_space(self) -> None:
        """Give the space deletes freed back, a short transaction a step, pausing between."""
        while True:
            began = time.monotonic()
            more = self._reclaim()
            if not more:
                return
            time.sleep(time.monotonic() - began)

    # -- runs ---------------------------------------------------------------------------

    def _filter_params(self, where: PruneFilter) -> dict[str, Any]:
        return {
            "before": where.before,
            "status": where.status,
            "name": where.name,
            "exclude": self._list(list(where.exclude)),
        }

    def prunable_runs(self, where: PruneFilter, *, limit: int) -> list[str]:
        """Up to ``limit`` ids of runs ``where`` selects, oldest change first."""
        params = {**self._filter_params(where), "limit": limit}
        return [str(row[0]) for row in self._rows("prunable_runs", params)]

    def count_prunable(self, where: PruneFilter) -> int:
        """How many runs ``where`` selects now."""
        return int(self._rows("count_prunable", self._filter_params(where))[0][0])

    def prune_runs(self, ids: Sequence[str], where: PruneFilter) -> list[str]:
        """Delete the runs among ``ids`` that ``where`` still selects, with every row kept for
        them, in one transaction; the ids deleted."""
        params = {**self._filter_params(where), "ids": self._list(list(ids))}
        query = self._sql("delete_runs", params)

        def work(conn: Any) -> list[str]:
            began = time.monotonic()
            deleted = [str(row[0]) for row in conn.execute(query, params).fetchall()]
            if deleted:
                gone = {"ids": self._list(deleted)}
                for name in _DEPENDENTS:
                    conn.execute(self._q[name], gone)
            self.last_held = time.monotonic() - began
            return deleted

        deleted: list[str] = self._write(work)
        return deleted

    # -- garbage --------------------------------------------------------------------------

    def _mark(self, cutoff: float) -> tuple[list[bytes], dict[bytes, list[bytes]]]:
        """The payload rows no column reaches and no writer touched since ``cutoff``, parents
        before children, and what each row refers to."""

        def read(conn: Any) -> tuple[list[bytes], dict[bytes, list[bytes]]]:
            graph = Graph()
            for digest, touched_at, head, refs in conn.execute(self._q["payload_graph"]):
                sealed = bytes(head[:1]) == SEALED_TAG
                if sealed and refs is None:
                    # sealed before refs were kept (schema 26): what it, or a column's sealed
                    # root beside it, refers to cannot be proven, so nothing is collected
                    return [], {}
                recent = touched_at is not None and touched_at >= cutoff
                listed = bytes(refs) if sealed else None
                graph.add(bytes(digest), bytes(head), recent=recent, refs=listed)
            references: list[bytes] = []
            for (column,) in conn.execute(self._q["payload_references"]):
                references.extend(referenced_by(bytes(column)))
            return graph.garbage(references), graph.children

        marked: tuple[list[bytes], dict[bytes, list[bytes]]] = self._reading(read)
        return marked

    def collect_payloads(
        self, *, now: float, grace: float = GRACE_SECONDS, batch: int | None = None
    ) -> int:
        """Delete the payload rows no run uses, in transactions of at most ``batch`` rows;
        how many it deleted."""
        batch = batch or self._collect_batch
        cutoff = now - grace
        order, children = self._mark(cutoff)
        graph_kept: set[bytes] = set()
        deleted = 0
        for part in batches(order, batch):
            todo = [digest for digest in part if digest not in graph_kept]
            if not todo:
                continue

            def work(conn: Any, todo: list[bytes] = todo) -> tuple[list[bytes], list[bytes]]:
                touched = self._touched(conn, todo)
                revived = [d for d in todo if (touched.get(d) or 0.0) >= cutoff]
                kept = _below(revived, children)
                gone = [digest for digest in todo if digest not in kept]
                self._delete_payloads(conn, gone)
                return gone, revived

            began = time.monotonic()
            gone, revived = self._write(work)
            held = time.monotonic() - began
            time.sleep(held)  # claims get their turn between batches
            graph_kept |= _below(revived, children)
            deleted += len(gone)
        return deleted

    def collect_chunks(
        self, *, now: float, grace: float = GRACE_SECONDS, batch: int | None = None
    ) -> int:
        """Delete snapshot chunks no snapshot uses, stored before the grace window, in
        transactions of at most ``batch``; how many it deleted."""
        batch = batch or self._collect_batch
        params = {"before": now - grace, "limit": batch}
        deleted = 0
        while True:

            def work(conn: Any) -> tuple[int, int]:
                ids = [row[0] for row in conn.execute(self._q["unused_chunks"], params)]
                gone = 0
                for digest in ids:
                    key = {"digest": bytes(digest)}
                    gone += conn.execute(self._q["delete_unused_chunk"], key).rowcount
                return len(ids), gone

            began = time.monotonic()
            found, gone = self._write(work)
            held = time.monotonic() - began
            time.sleep(held)
            deleted += gone
            if found < batch:
                break
        return deleted


def _below(roots: list[bytes], children: dict[bytes, list[bytes]]) -> set[bytes]:
    """``roots`` and every row they reach through ``children``."""
    seen = set(roots)
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen
