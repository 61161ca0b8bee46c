"""The worker: claims runnable runs with a lease, executes them, and stops gracefully.

The store says which runs are claimable (pending, due, or left by a holder that is gone or
whose lease lapsed); the worker asks it for candidates and has the driver take and drive each.
Claims are compare-and-set updates of the lease, so two workers never execute one run at once.
Suspended runs hold nothing here.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from . import _inputs
from ._engine.driver import Driver
from ._engine.dryrun import warn_stranded
from ._engine.observe import fields
from ._errors import UsageError
from ._leases import HOST, HOSTNAME, holder_is_gone
from ._memory import Trimmer
from ._prune import Sweeper
from ._shutdown import shut_down
from ._slots import Slots
from ._store.base import WorkerRow
from ._ticks import Ticker

if TYPE_CHECKING:
    from ._metrics import Metrics
    from ._runtime import Runtime
    from ._store import RunRow

__all__ = ["Companion", "Worker", "serve"]

log = logging.getLogger("stalwart")

IDLE_POLL_SECONDS = 0.01  # the shortest wait before a due timer (the loop's turn: Changes)
FULL_POLL_SECONDS = 0.5
HOST_SCAN_SECONDS = 1.0
DEFAULT_CONCURRENCY = 8


class Companion(Protocol):
    """What runs beside a worker's claim loop while it serves (the app's subscriptions). One
    whose threads use the store says how many may at once in an attribute ``threads``, and the
    worker reserves a store connection for each."""

    def start(self, metrics: Metrics | None) -> None:
        """Start, counting into the worker's metrics (``None``: it serves none)."""

    def stop(self) -> None:
        """Stop (before the worker gives its runs back)."""


def serve(
    driver: Driver,
    concurrency: int | None,
    queues: list[str] | None,
    metrics_port: int | None,
    metrics_host: str,
    *,
    companions: Sequence[Companion] | None = None,
    metrics_server: bool = True,
) -> None:
    """``app.serve``: a worker, with its metrics served at ``metrics_host:metrics_port`` (by
    a companion instead when not ``metrics_server``: the worker's ``--http-port``)."""
    worker = Worker(driver, concurrency=concurrency, queues=queues)
    worker.companions.extend(companions or ())
    warn_stranded(driver.runtime, worker.queues)
    if metrics_port is not None:
        worker.serve_metrics(metrics_host, metrics_port, own_server=metrics_server)
    worker.serve()


@contextmanager
def _beside(companions: Sequence[Companion], metrics: Metrics | None) -> Iterator[None]:
    """The companions run while the block runs: stopped before the worker gives runs back."""
    started: list[Companion] = []
    try:
        for companion in companions:
            companion.start(metrics)
            started.append(companion)
        yield
    finally:
        for companion in reversed(started):
            companion.stop()


def _check_queues(queues: list[str] | None) -> None:
    if queues is not None and (
        isinstance(queues, str) or not all(isinstance(q, str) and q for q in queues)
    ):
        raise TypeError(f"queues={queues!r}: pass a list of queue names")
    for queue in queues or ():
        _inputs.name(queue, "queues")


def _orphans(runtime: Runtime, names: list[str], free: int) -> list[RunRow]:
    """Up to ``free`` runs held by processes of this host that are gone (not this app's)."""
    orphans: list[RunRow] = []
    # One read for every row (a restart finds dozens), not one more per run.
    for row in runtime.store.held_on_host(host_prefix=f"{HOST}/", names=names):
        holder = row.lease_owner or ""  # held_on_host lists held runs only
        if len(orphans) >= free:
            break
        if not holder.startswith(runtime.holder + "#") and holder_is_gone(holder):
            orphans.append(row)
    return orphans


def _on_stop_signals(note: Callable[[int], None]) -> Callable[[], None]:
    """On the main thread: SIGINT and SIGTERM call ``note(signum)``; what restores the previous
    handlers (elsewhere nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> None:
        # Only a store: the handler runs on the main thread between any two bytecodes,
        # possibly while the loop holds the wake-up Event's lock or the log handler's,
        # and taking either here would deadlock. The loop notices within one poll.
        note(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _beat(runtime: Runtime, queues: list[str], started_at: float, running: int) -> None:
    """Insert or refresh a worker's row in the store; a failure is logged (the next beat
    tries again: only operators read the row)."""
    row = WorkerRow(
        id=runtime.owner,
        host=HOSTNAME,
        pid=os.getpid(),
        queues=json.dumps(queues),
        started_at=started_at,
        seen_at=runtime.clock.time(),
        running=running,
        workflows=json.dumps(sorted(runtime.registry.workflows)),
    )
    try:
        runtime.store.beat_worker(row)
    except Exception:
        log.warning(
            "worker %s: refreshing its row failed",
            runtime.owner,
            exc_info=True,
            extra=fields(None, runtime.owner),
        )


class Worker:
    """Executes the runs of one app's workflows until asked to stop."""

    def __init__(
        self, driver: Driver, *, concurrency: int | None = None, queues: list[str] | None = None
    ) -> None:
        concurrency = DEFAULT_CONCURRENCY if concurrency is None else concurrency
        if not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"concurrency={concurrency!r}: must be an int >= 1")
        _check_queues(queues)
        self.driver = driver
        self.runtime = driver.runtime
        self.concurrency = concurrency
        self.queues = list(queues) if queues else self._all_queues()
        self.stopping = threading.Event()
        self._signalled: int | None = None  # set by the signal handler, read by the loop
        self.slots = Slots(driver, self.stopping)  # the runs it executes
        self.keyless = self.slots.keyless
        self._started_at = 0.0
        self._next_beat = 0.0
        self._ticks = Ticker(self.runtime)  # fires the app's schedules (_ticks)
        self._trimmer = Trimmer(self.runtime.store.release_memory)  # memory back after a burst
        self.metrics: Metrics | None = None
        self._metrics_at: tuple[str, int] | None = None
        self.companions: list[Companion] = []  # started and stopped with the claim loop

    def serve_metrics(self, host: str, port: int, *, own_server: bool = True) -> None:
        """Serve this worker's Prometheus metrics at ``http://host:port/metrics`` while it
        serves (``UsageError`` now when prometheus-client is not installed); without
        ``own_server``, only count them (a companion serves them on its port)."""
        from ._metrics import Metrics

        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise UsageError(f"metrics_port={port!r}: pass a TCP port number (0 to 65535)")
        if not isinstance(host, str) or not host:
            raise UsageError(f"metrics_host={host!r}: pass a host name or address")
        self.metrics = Metrics(self.runtime, self.queues)
        self._metrics_at = (host, port) if own_server else None

    def _all_queues(self) -> list[str]:
        """``default``, every declared queue and every queue a workflow names."""
        named = {wf.queue for wf in self.runtime.registry.workflows.values()}
        return sorted({"default", *self.runtime.queues, *named})

    # -- the loop -------------------------------------------------------------------------

    def serve(self) -> None:
        """Claim and execute runs until SIGINT/SIGTERM (or :meth:`stop`), then stop gracefully."""
        names = sorted(self.runtime.registry.workflows)
        if not names:
            raise UsageError(
                "this app declares no workflows: there is nothing to serve (declare them with "
                "@app.workflow in the module the worker imports)"
            )
        restore = _on_stop_signals(self._note_signal)
        log.info(
            "worker %s: serving the store %s: %s on queues %s (concurrency %d)",
            self.runtime.owner,
            self.runtime.name,
            ", ".join(names),
            ", ".join(self.queues),
            self.concurrency,
            extra=fields(None, self.runtime.owner),
        )
        try:
            self._start_metrics()
            self.runtime.store.reserve_connections(
                self.concurrency + 4 + sum(getattr(c, "threads", 0) for c in self.companions)
            )
            pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="stalwart-run")
            self._start_threads(pool)
            sweeper = Sweeper(self.runtime, self.stopping, self._count_pruned)
            sweeper.start()  # a thread of its own: a prune never holds up a claim
            self._started_at = self.runtime.clock.time()
            self._beat()
            try:
                # a store's pushed change (a NOTIFY) wakes the loop at once
                with (
                    _beside(self.companions, self.metrics),
                    self.runtime.store.changes.subscribed(self.runtime.wakeup.set),
                ):
                    self._loop(names, pool)
            finally:
                self._shut_down(pool)
                sweeper.join()
        finally:
            self._stop_metrics()
            restore()
            self._ticks.leave(self._started_at)  # last ticks, then drop this worker's row
        log.info("worker %s: stopped", self.runtime.owner, extra=fields(None, self.runtime.owner))

    def _start_metrics(self) -> None:
        if self.metrics is None:
            return
        self.runtime.observers.append(self.metrics)
        if self._metrics_at is None:  # a companion serves them (the worker's --http-port)
            return
        url = self.metrics.start(*self._metrics_at)
        log.info(
            "worker %s: metrics at %s",
            self.runtime.owner,
            url,
            extra=fields(None, self.runtime.owner),
        )

    def _count_pruned(self, count: int) -> None:
        if self.metrics is not None:
            self.metrics.runs_pruned.inc(count)

    def _stop_metrics(self) -> None:
        if self.metrics is not None:
            if self.metrics in self.runtime.observers:
                self.runtime.observers.remove(self.metrics)
            self.metrics.stop()

    def _start_threads(self, pool: ThreadPoolExecutor) -> None:
        """Start every thread the worker will use now, so its footprint is fixed from the
        start: runs add none, executing or suspended."""
        self.driver.keeper.start()
        if any(wf.is_async for wf in self.runtime.registry.workflows.values()):
            _ = self.runtime.loop.loop  # the one loop every async run of this worker runs on
        barrier = threading.Barrier(self.concurrency)
        for future in [pool.submit(barrier.wait) for _ in range(self.concurrency)]:
            future.result()

    def stop(self) -> None:
        """Ask the loop to stop claiming and shut down gracefully."""
        self.stopping.set()
        self.runtime.wakeup.set()

    def _loop(self, names: list[str], pool: ThreadPoolExecutor) -> None:
        store = self.runtime.store
        idle = store.changes.idle_seconds
        last_version = -1
        next_full = 0.0
        next_scan = 0.0
        while not self.stopping.is_set():
            if self._signalled is not None:
                name = signal.Signals(self._signalled).name
                log.info(
                    "worker %s: %s received, stopping",
                    self.runtime.owner,
                    name,
                    extra=fields(None, self.runtime.owner),
                )
                self.stop()
                break
            if self.runtime.loop.closing:  # the app closes under it: take nothing more
                log.warning(
                    "worker %s: its app was closed while it served; stopping",
                    self.runtime.owner,
                    extra=fields(None, self.runtime.owner),
                )
                self.stop()
                break
            now = time.monotonic()
            version = store.data_version()
            nudged = self.runtime.wakeup.is_set()
            if nudged or version != last_version or now >= next_full:
                self.runtime.wakeup.clear()
                last_version = version
                next_start, refused = self._claim(names, pool)
                next_full = now + self._until_next_wake(names, refused)
                if next_start is not None:
                    wait = max(0.0, next_start - self.runtime.clock.time())
                    next_full = min(next_full, now + wait)
            if now >= next_scan:
                next_scan = now + HOST_SCAN_SECONDS
                self._take_over_dead_holders(names, pool)
            if now >= self._next_beat:
                self._beat()
            self._trimmer.note(len(self.slots), now)
            self.runtime.wakeup.wait(self._ticks.poll(self._started_at, idle))

    def _beat(self) -> None:
        """Refresh this worker's row, which operators read (``app.workers()``), as often as
        leases are renewed."""
        self._next_beat = time.monotonic() + max(0.05, self.runtime.lease_seconds / 3)
        _beat(self.runtime, self.queues, self._started_at, len(self.slots))

    def _until_next_wake(self, names: list[str], refused: set[str]) -> float:
        """Seconds until the next full poll: sooner when a timer falls due before it.

        Only timers this worker could act on count: none while it has no free slot (a run
        that ends wakes the loop), and none of a queue that just refused a start (the finish
        that frees a slot notifies, and the regular poll comes back anyway)."""
        queues = [queue for queue in self.queues if queue not in refused]
        if not queues or self._free_slots() <= 0:
            return FULL_POLL_SECONDS
        due = self.runtime.store.next_wake(names=names, queues=queues)
        if due is None:
            return FULL_POLL_SECONDS
        return min(FULL_POLL_SECONDS, max(IDLE_POLL_SECONDS, due - self.runtime.clock.time()))

    def _free_slots(self) -> int:
        return self.concurrency - len(self.slots)

    def _claim(self, names: list[str], pool: ThreadPoolExecutor) -> tuple[float | None, set[str]]:
        """Start what this worker has room for; returns when a rate-limited queue that
        refused a start will next allow one (``None``: no such queue), and the queues that
        refused a start.

        A queue at its limit is left out of the next look, so that its waiting runs, however
        many and however old, never hide the runs of other queues."""
        refused: set[str] = set()
        free = self._free_slots()
        while free > 0 and not self.stopping.is_set():
            queues = [queue for queue in self.queues if queue not in refused]
            if not queues:
                break
            now = self.runtime.clock.time()
            candidates = self.runtime.store.claim_candidates(
                names=names, queues=queues, now=now, limit=free * 2
            )
            newly_refused = False
            together: list[RunRow] = []  # runs of queues without limits, taken at once
            for row in candidates:
                if free - len(together) <= 0 or self.stopping.is_set():
                    break
                if self.slots.holds(row.workflow_id, now):
                    continue
                if row.queue in refused:
                    continue
                if row.queue not in self.runtime.queues:
                    together.append(row)
                elif self._start_all([row], pool)[0]:
                    free -= 1
                else:
                    refused.add(row.queue)  # at its limit (or another worker was faster)
                    newly_refused = True
            free -= sum(self._start_all(together, pool))
            if not newly_refused:
                break
        # Only a rate frees up at a known time; a queue refused for its concurrency is woken by
        # the finish that frees a slot (a notification, or the regular poll).
        now = self.runtime.clock.time()
        starts = [
            self.runtime.store.next_start(queue, self.runtime.queues[queue])
            for queue in sorted(refused)
        ]
        return min((t for t in starts if t is not None and t > now), default=None), refused

    def _take_over_dead_holders(self, names: list[str], pool: ThreadPoolExecutor) -> None:
        """Runs whose holder on this host died are taken at once, not after their lease."""
        if not self.stopping.is_set():
            self._start_all(_orphans(self.runtime, names, self._free_slots()), pool)

    def _start_all(self, rows: list[RunRow], pool: ThreadPoolExecutor) -> list[bool]:
        """Take the leases of ``rows`` at once (so that the claims share the store's
        transactions: group commit) and execute each run taken."""
        workflows = self.runtime.registry.workflows
        runs = [(wf, row) for row in rows if (wf := workflows.get(row.name)) is not None]
        taken, error = self.driver.take_all(runs, self.runtime.clock.time())
        took = {row.workflow_id: inv for (_wf, row), inv in zip(runs, taken, strict=True)}
        started = self.slots.run_all([(row, took.get(row.workflow_id)) for row in rows], pool)
        if error is not None:
            raise error  # after every run taken was started: none is left held and idle
        return started

    # -- stopping -------------------------------------------------------------------------

    def _note_signal(self, signum: int) -> None:
        self._signalled = signum

    def _shut_down(self, pool: ThreadPoolExecutor) -> None:
        """Let current steps finish, give runs back at their next boundary, release the rest."""
        shut_down(self.runtime, self.slots.in_progress(), pool)
