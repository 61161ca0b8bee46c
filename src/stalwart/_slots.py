"""The runs one worker executes, each in a slot: a thread of the worker's pool for a sync
workflow, a task on the app's event loop for an async one (which borrows a thread of the pool
only for what blocks: ``Driver.drive_async``). A run's slot frees as its execution ends."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from ._engine.driver import Driver
from ._engine.invocation import Invocation
from ._errors import EncryptionKeyMissing
from ._shutdown import Active
from ._store.group_commit import settled

if TYPE_CHECKING:
    from ._runtime import Runtime
    from ._store import RunRow

__all__ = ["Keyless", "Slots"]

log = logging.getLogger("stalwart")

T = TypeVar("T")


class Keyless:
    """The runs whose payloads need a key this worker lacks: each is left to workers that
    have it (its lease was given back) and not claimed here again for a lease period."""

    def __init__(self) -> None:
        self.until: dict[str, float] = {}
        self._lock = threading.Lock()

    def __contains__(self, workflow_id: str) -> bool:
        return workflow_id in self.until

    def leave(self, workflow_id: str, error: EncryptionKeyMissing, runtime: Runtime) -> None:
        with self._lock:
            self.until[workflow_id] = runtime.clock.time() + runtime.lease_seconds
        log.error(
            "run %s: %s; left for a worker with that key (not claimed here for %.0f s)",
            workflow_id,
            error,
            runtime.lease_seconds,
        )

    def leaves(self, workflow_id: str, now: float) -> bool:
        """Whether this worker still leaves ``workflow_id`` to others."""
        with self._lock:
            until = self.until.get(workflow_id)
            if until is not None and until <= now:
                del self.until[workflow_id]
                return False
            return until is not None


class Slots:
    """The runs a worker executes (see the module's docstring)."""

    def __init__(self, driver: Driver, stopping: threading.Event) -> None:
        self.driver = driver
        self.runtime = driver.runtime
        self.stopping = stopping  # set: each invocation after a wake gives its run back
        self.active: dict[str, tuple[Future[None], list[Invocation]]] = {}
        self.keyless = Keyless()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self.active)

    def holds(self, workflow_id: str, now: float) -> bool:
        """Whether this worker executes the run, or leaves it to a worker with its key."""
        with self._lock:
            if workflow_id in self.active:
                return True
        return self.keyless.leaves(workflow_id, now)

    def in_progress(self) -> Active:
        """The executions not ended yet."""
        with self._lock:
            return [(w, entry) for w, entry in self.active.items() if not entry[0].done()]

    def run_all(
        self, taken: list[tuple[RunRow, Invocation | None]], pool: ThreadPoolExecutor
    ) -> list[bool]:
        """Execute each invocation (``None``: nothing was taken) in a slot; whether each
        started (a run that could not start is given back at once). The async runs' tasks
        start on the app's loop together, with one wake-up of its thread."""
        started: list[bool] = []
        starting: list[tuple[Coroutine[Any, Any, None], Future[None]]] = []
        held: list[tuple[Invocation, int]] = []
        for row, inv in taken:
            if inv is None or not inv.wf.is_async:
                started.append(inv is not None and self._submit(row, inv, pool))
                continue
            invocations = [inv]
            future: Future[None] = Future()
            starting.append((self._execute_async(inv, row, invocations, pool), future))
            held.append((inv, len(started)))
            self._hold(row.workflow_id, future, invocations)
            started.append(True)
        if starting:
            try:
                self.runtime.loop.loop.call_soon_threadsafe(_start_tasks, starting)
            except Exception as exc:  # the app closed its loop: give the runs back at once
                for (coro, future), (inv, at) in zip(starting, held, strict=True):
                    coro.close()
                    self.driver.abandon(inv, exc)
                    _cancel(future)
                    started[at] = False
        return started

    def _submit(self, row: RunRow, inv: Invocation, pool: ThreadPoolExecutor) -> bool:
        """Execute a sync workflow's run in a thread of ``pool``."""
        invocations = [inv]
        try:
            future = pool.submit(self._execute, inv, row, invocations)
        except Exception as exc:  # the pool shut down
            self.driver.abandon(inv, exc)
            return False
        self._hold(row.workflow_id, future, invocations)
        return True

    def _hold(self, workflow_id: str, future: Future[None], invocations: list[Invocation]) -> None:
        with self._lock:
            self.active[workflow_id] = (future, invocations)
        # its slot frees as it ends (at once when it already has): no scan of every run
        future.add_done_callback(lambda done: self._ended(workflow_id, done, invocations))

    def _ended(self, workflow_id: str, future: Future[None], invocations: list[Invocation]) -> None:
        with self._lock:
            held = self.active.get(workflow_id)
            if held is not None and held[0] is future:
                del self.active[workflow_id]
        self.runtime.wakeup.set()  # a slot is free: the worker's loop claims the next run
        last = invocations[-1]
        if future.cancelled() and not last.abandoned:  # a task cancelled before it began
            error = asyncio.CancelledError("the app's event loop closed before the run began")
            threading.Thread(target=self.driver.abandon, args=(last, error), daemon=True).start()

    def _execute(self, inv: Invocation, row: RunRow, invocations: list[Invocation]) -> None:
        error: BaseException | None = None
        try:
            follow = self._follower(invocations)
            error = self.driver.drive(inv, row, follow=follow).error
        except Exception as exc:  # logged by the driver, which gave the run's lease back
            error = exc
        self._ended_with(row, error)

    async def _execute_async(
        self,
        inv: Invocation,
        row: RunRow,
        invocations: list[Invocation],
        pool: ThreadPoolExecutor,
    ) -> None:
        """``_execute`` of an async workflow's run, as a task on the app's loop; what needs
        a thread runs in one of ``pool``'s (there is one for each run the worker holds)."""
        loop = asyncio.get_running_loop()

        async def offload(fn: Callable[..., T], *args: Any) -> T:
            call = functools.partial(contextvars.copy_context().run, fn, *args)
            try:
                future = loop.run_in_executor(pool, call)
            except RuntimeError:  # the pool shut down: a step outlived the shutdown's grace
                future = loop.run_in_executor(None, call)
            return await _to_its_end(future)

        error: BaseException | None = None
        try:
            follow = self._follower(invocations)
            error = (await self.driver.drive_async(inv, row, offload, follow=follow)).error
        except (Exception, KeyboardInterrupt, SystemExit) as exc:  # as _execute; on the
            error = exc  # loop, the last two would stop it: the driver logged them
        self._ended_with(row, error)

    def _follower(self, invocations: list[Invocation]) -> Callable[[Invocation], None]:
        """What notes each invocation of a run after a wake (``Driver.drive``'s ``follow``)."""

        def follow(next_inv: Invocation) -> None:
            invocations.append(next_inv)
            if self.stopping.is_set():
                next_inv.releasing.set()

        return follow

    def _ended_with(self, row: RunRow, error: BaseException | None) -> None:
        if isinstance(error, EncryptionKeyMissing):
            self.keyless.leave(row.workflow_id, error, self.runtime)


async def _to_its_end(future: asyncio.Future[T]) -> T:
    """What ``future``, a thread's work on a run, returns: a cancellation of this task
    meanwhile waits for the thread, and is taken back (what the thread recorded is the
    run's outcome, and the run's slot frees only once it is recorded)."""
    task = asyncio.current_task()
    await settled(future, task, 0 if task is None else task.cancelling())
    return future.result()


def _start_tasks(starting: list[tuple[Coroutine[Any, Any, None], Future[None]]]) -> None:
    """(On the app's loop) Start each run's task; its future settles as the task ends."""
    loop = asyncio.get_running_loop()
    for coro, future in starting:
        loop.create_task(coro).add_done_callback(functools.partial(_settle, future))


def _settle(future: Future[None], task: asyncio.Task[None]) -> None:
    if task.cancelled():
        _cancel(future)
    elif (error := task.exception()) is not None:
        future.set_exception(error)
    else:
        future.set_result(None)


def _cancel(future: Future[None]) -> None:
    """Cancel ``future`` and wake what waits for it (``concurrent.futures.wait`` is woken by
    ``set_running_or_notify_cancel``, which an executor calls, not by ``cancel``)."""
    if future.cancel():
        future.set_running_or_notify_cancel()
