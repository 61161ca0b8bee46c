"""Helpers for testing code built on stalwart.

:class:`FakeClock` makes time jump instead of pass. The other helpers are the one seam through
which a test looks inside an app: its store (to inspect or damage the rows a run left), the
runtime values it derives (lease owner, lease length, queue limits...), a claim made the way a
worker makes it, and SQL-level access to a store. What they return is the engine's own
machinery, whose shape may change between releases; these functions are what stays.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import Stalwart
    from ._clock import Clock
    from ._serde import Codec
    from ._store import Store
    from ._store.base import QueueLimits
    from ._worker import Worker

__all__ = [
    "FakeClock",
    "RuntimeView",
    "claim_run",
    "execute_sql",
    "raw_connection",
    "raw_rows",
    "runtime_of",
    "store_of",
    "worker",
]


class FakeClock:
    """A clock that stands still until told to move; ``sleep`` jumps forward at once.

    Pass it as ``Stalwart(..., clock=FakeClock())`` so retry backoffs and recorded times take no
    wall-clock time in tests.
    """

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def time(self) -> float:
        """The current fake time in epoch seconds."""
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds`` without waiting, and remember the request."""
        with self._lock:
            self.slept.append(seconds)
            self._now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        with self._lock:
            self._now += seconds


def store_of(app: Stalwart) -> Store:
    """The store ``app`` reads and writes: to inspect the rows a run left, call a store verb
    directly, or replace a verb (``monkeypatch.setattr(store_of(app), "append", ...)``) to
    inject a failure. Every store of one URL sees the same rows; this one is ``app``'s own."""
    return app._runtime.store


class RuntimeView:
    """Read-only view of what an app derived at construction: its clock, serializer, lease
    settings, queue limits and lease owner. Every attribute reads the live value."""

    def __init__(self, app: Stalwart) -> None:
        self._app = app

    @property
    def clock(self) -> Clock:
        """The clock the app reads time from (the ``clock=`` given, else the system clock,
        corrected to the server's on PostgreSQL)."""
        return self._app._runtime.clock

    @property
    def codec(self) -> Codec:
        """The app's serializer: ``encode(value) -> bytes`` and ``decode(bytes)``, as payloads
        are stored (a run's input is ``encode({"args": [...], "kwargs": {...}})``)."""
        return self._app._runtime.codec

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts without renewal (the ``lease_seconds=`` given)."""
        return self._app._runtime.lease_seconds

    @property
    def owner(self) -> str:
        """This process's owner id for the app (``host-pid-suffix``, as logs and
        ``app.workers()`` name it; its lease holders end with it); a forked child gets a new
        one."""
        return self._app._runtime.owner

    def new_claim_owner(self) -> str:
        """A fresh lease holder for one claim (``HOST/pid/start/owner#n``): the machine, the
        process, its owner id and which claim it is, so that two claims of one run by the same
        app are told apart."""
        return self._app._runtime.claim_owner()

    @property
    def queues(self) -> Mapping[str, QueueLimits]:
        """The limits of the queues declared with ``app.queue(...)``, by name."""
        return MappingProxyType(self._app._runtime.queues)

    @property
    def wakeup(self) -> threading.Event:
        """The Event a worker's loop clears and waits on; set when this process makes something
        claimable."""
        return self._app._runtime.wakeup


def runtime_of(app: Stalwart) -> RuntimeView:
    """What ``app`` derived at construction (clock, codec, lease owner...), as a
    :class:`RuntimeView`."""
    return RuntimeView(app)


def claim_run(app: Stalwart, workflow_id: str) -> str | None:
    """Claim the lease of run ``workflow_id`` as a worker does (the run must be claimable:
    pending, due, or left by a holder that is gone or whose lease lapsed), without executing it.

    Returns the new lease owner; ``None`` if another process was faster or the run's queue is
    at its limit. The run stays held by that owner until its lease lapses."""
    runtime = app._runtime
    row = runtime.store.get_run(workflow_id)
    if row is None:
        raise KeyError(workflow_id)
    taken = app._driver.take(runtime.registry.workflows[row.name], row, runtime.clock.time())
    return None if taken is None else taken.owner


def execute_sql(store: Store, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Run one raw SQL statement (``:name`` placeholders) on ``store``, whatever its backend,
    committed at once; the rows it returns, if any. For tests that inspect or damage rows."""
    impl: Any = store
    if type(impl).__name__ == "PostgresStore":
        from ._store.postgres import _pyformat

        sql = _pyformat(sql)

    def work(conn: Any) -> list[Any]:
        cur = conn.execute(sql, params or {})
        return list(cur.fetchall()) if cur.description else []

    run: Callable[[Callable[[Any], list[Any]]], list[Any]] = impl._run
    return run(work)


def raw_rows(store: Store, query_name: str, params: dict[str, Any]) -> list[Any]:
    """The rows of the store's own named query ``query_name`` (from its dialect's
    ``queries.sql``, e.g. ``"schema_version"``) with ``params``."""
    impl: Any = store
    rows: list[Any] = impl._rows(query_name, params)
    return rows


def raw_connection(store: Store) -> Any:
    """The one ``sqlite3.Connection`` of a SQLite (or ``memory://``) store, to read its
    ``PRAGMA`` settings or query it directly. Other backends have a pool, not one connection."""
    impl: Any = store
    if type(impl).__name__ != "SQLiteStore":
        raise TypeError(f"{type(impl).__name__} has no single connection; use execute_sql()")
    return impl._conn


def worker(
    app: Stalwart, *, concurrency: int | None = None, queues: list[str] | None = None
) -> Worker:
    """A worker of ``app`` to run in a thread of the test (``serve()``, then ``stop()``), like
    ``app.serve`` but stoppable without a signal (it consumes the app's subscriptions too)."""
    from ._worker import Worker as _Worker

    made = _Worker(app._driver, concurrency=concurrency, queues=queues)
    made.companions.extend(app._ingress.companions())
    return made
