"""Retention and prune (docs/lifecycle.md): ended runs deleted with everything kept for them,
by ``app.prune`` and ``stalwart prune``, and by every worker in the background for the app's
and its workflows' retention; then the content-addressed rows no run uses any more.

Each batch of runs is one store transaction (``PruneStore.prune_runs``), at most ``_BATCH``
runs, sized to hold the store a few milliseconds (SQLite's one writer lock is every claim's
too), and after each the prune pauses as long as the batch held the store, so claims get their
turn.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _inputs
from ._errors import UsageError
from ._runtime import Runtime
from ._store.prunes import TERMINAL, PruneFilter

__all__ = ["Pruning", "Sweeper", "prune_runs", "retention_of"]

log = logging.getLogger("stalwart")

_BATCH = 500  # runs a transaction at most
# How long one batch may hold the store: on SQLite its one writer lock, which every claim
# needs, so a batch is sized to hold it about this long; a PostgreSQL batch locks only its own
# runs' rows, but a big one's burst of deletes and write-ahead log slows the server's claims.
_SQLITE_HOLD = 0.008
_POSTGRES_HOLD = 0.04
SWEEP_SECONDS = 60.0  # each worker sweeps at least this often
COLLECT_SECONDS = 3600.0  # and collects garbage at least this often, sooner after a prune


def retention_of(value: Any, call: str) -> float | None:
    """A retention as seconds (``None`` keeps forever)."""
    return _inputs.limit(value, "retention", call, positive=True)


def _cutoff(older_than: Any, now: float) -> float:
    """``older_than`` as the epoch seconds before which runs go: a ``datetime`` (naive: local
    time), or seconds or a ``timedelta`` back from ``now``."""
    if isinstance(older_than, _dt.datetime):
        return older_than.timestamp()
    return now - _inputs.seconds(older_than, "older_than", "app.prune")


def _hold(runtime: Runtime) -> float:
    return _SQLITE_HOLD if runtime.url.startswith(("sqlite", "memory")) else _POSTGRES_HOLD


def _next_size(size: int, held: float, hold: float) -> int:
    """The next batch's size: the one that would have held the store ``hold`` seconds."""
    wanted = size * hold / max(held, 1e-4)
    return max(1, min(_BATCH, int(min(wanted, size * 2))))


def prune_runs(
    runtime: Runtime,
    where: PruneFilter,
    *,
    stopping: threading.Event | None = None,
    counted: Callable[[int], None] | None = None,
) -> int:
    """Delete every run ``where`` selects, a batch a transaction, pausing between batches as
    long as each held the store (on SQLite, batches sized to hold it a few milliseconds); how
    many it deleted."""
    store, hold, deleted = runtime.store, _hold(runtime), 0
    size = 10
    while stopping is None or not stopping.is_set():
        ids = store.prunable_runs(where, limit=size)
        if not ids:
            break
        gone = store.prune_runs(ids, where)
        held = store.last_held
        deleted += len(gone)
        if counted is not None and gone:
            counted(len(gone))
        if not gone:
            break  # every one was redriven or given a child since it was found
        size = _next_size(size, held, hold)
        time.sleep(held)
    if deleted:
        store.release_space()
    return deleted


def collect(runtime: Runtime) -> tuple[int, int]:
    """Collect the payload rows and snapshot chunks no run uses; how many of each."""
    now = runtime.clock.time()
    payloads = runtime.store.collect_payloads(now=now)
    chunks = runtime.store.collect_chunks(now=now)
    if payloads or chunks:
        runtime.store.release_space()
    if payloads or chunks:
        log.info("prune: collected %d payload rows and %d snapshot chunks", payloads, chunks)
    return payloads, chunks


def _described(where: PruneFilter) -> str:
    when = _dt.datetime.fromtimestamp(where.before, _dt.UTC).isoformat(timespec="seconds")
    parts = [f"ended before {when}"]
    if where.status is not None:
        parts.append(f"status {where.status}")
    if where.name is not None:
        parts.append(f"workflow {where.name}")
    return ", ".join(parts)


class Pruning:
    """``app.prune``: the app's mixin."""

    _runtime: Runtime

    def prune(
        self,
        older_than: Any,
        *,
        status: str | None = None,
        name: str | None = None,
        dry_run: bool = False,
        by: str | None = None,
    ) -> int:
        """Delete the ended runs (``completed``, ``failed``, ``cancelled``) last changed before
        ``older_than`` (a ``datetime``, or seconds or a ``timedelta`` back from now), of
        ``status`` and workflow ``name`` when given, with everything kept for them, then the
        stored values no run uses any more; returns how many runs it deleted (with
        ``dry_run``, how many it would delete, deleting nothing). A run with a child still
        under way is kept. ``ValueError`` for a ``status`` that is not an ended one."""
        if status is not None and status not in TERMINAL:
            raise UsageError(
                f"app.prune(status={status!r}): a prune deletes ended runs only; pass one of "
                f"{', '.join(TERMINAL)} (or None for all three)"
            )
        if name is not None:
            _inputs.name(name, "name", "app.prune")
        if by is not None:
            _inputs.name(by, "by", "app.prune")
        runtime = self._runtime
        where = PruneFilter(_cutoff(older_than, runtime.clock.time()), status, name)
        if dry_run:
            return runtime.store.count_prunable(where)
        deleted = prune_runs(runtime, where)
        log.info("prune: deleted %d runs (%s) by %s", deleted, _described(where), by or "app")
        collect(runtime)
        return deleted


class Sweeper:
    """A worker's background prune: every ``SWEEP_SECONDS``, the runs past the retention of
    their workflow (else the app's), then, after a prune or every ``COLLECT_SECONDS``, the
    garbage. Runs on a thread of its own, so the claim loop never waits for it."""

    def __init__(
        self,
        runtime: Runtime,
        stopping: threading.Event,
        counted: Callable[[int], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.stopping = stopping
        self.counted = counted
        self._thread: threading.Thread | None = None

    def rules(self, now: float) -> list[PruneFilter]:
        """What one sweep prunes: each workflow's runs past its retention, and the others'
        past the app's."""
        own = {
            name: wf.retention
            for name, wf in self.runtime.registry.workflows.items()
            if wf.retention is not None
        }
        rules = [PruneFilter(now - seconds, name=name) for name, seconds in sorted(own.items())]
        if self.runtime.retention is not None:
            rules.append(PruneFilter(now - self.runtime.retention, exclude=tuple(sorted(own))))
        return rules

    def start(self) -> None:
        """Sweep from a daemon thread until ``stopping`` is set (nothing to do without any
        retention)."""
        if self.rules(0.0):
            self._thread = threading.Thread(target=self._serve, name="stalwart-prune", daemon=True)
            self._thread.start()

    def join(self) -> None:
        """Wait for the thread (after ``stopping`` was set)."""
        if self._thread is not None:
            self._thread.join()

    def sweep(self) -> int:
        """One sweep; how many runs it deleted."""
        deleted = 0
        for where in self.rules(self.runtime.clock.time()):
            count = prune_runs(self.runtime, where, stopping=self.stopping, counted=self.counted)
            if count:
                log.info("prune: deleted %d runs (%s) by retention", count, _described(where))
            deleted += count
        return deleted

    def _serve(self) -> None:
        next_collect = time.monotonic() + COLLECT_SECONDS
        while not self.stopping.is_set():
            try:
                if self.sweep() or time.monotonic() >= next_collect:
                    collect(self.runtime)
                    next_collect = time.monotonic() + COLLECT_SECONDS
            except Exception:  # the store away: the next sweep tries again
                log.warning("prune: the sweep failed; it runs again", exc_info=True)
            self.stopping.wait(SWEEP_SECONDS)
