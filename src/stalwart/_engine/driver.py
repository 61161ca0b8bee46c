"""The run lifecycle, once: acquire a run (create it, take it over, wait for it), execute it
until it ends or parks, and stop a run that keeps killing its workers (``poison.py``).
Creating a run and taking its lease are ``claims.py``'s (``RunClaims``, the driver's base);
``app.run`` also executes the children of its run that no worker took
(:meth:`Driver.help_children`).

``app.run`` drives one run from the calling thread (:meth:`Driver.run`); the worker takes
claimable runs (:meth:`Driver.take`) and drives each in a slot of its pool
(:meth:`Driver.drive`). Both go through the same steps:

    acquire/take ──> invocation ──> execute ──┬─ ended: completed, failed, cancelled,
         ^                          ^        │   needs_attention (the run has its answer)
         │                          └─ wake ─┤  (what it waited for is there: go on, same lease)
         └────── suspended, released ────────┴─ lease_lost, abort (someone else goes on)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext

from .._errors import WorkflowAlreadyExists, WorkflowNotFound
from .._loop import in_own_thread
from .._model import (
    ENDED,
    TERMINAL,
    OutcomeKind,
    RunStatus,
)
from .._registry import WorkflowDef
from .._runtime import Runtime
from .._store import RunRow
from .._store.rows import changed
from .calls import Calls
from .children import attention_below
from .claims import RunClaims
from .executor import Offload, Outcome, execute, execute_async
from .invocation import Invocation
from .keeper import LeaseKeeper
from .loop import install_task_factory
from .observe import begin, end

__all__ = ["Driver"]

log = logging.getLogger("stalwart")
WAIT_POLL_SECONDS = 0.02


class Driver(RunClaims):
    """Drives the runs this process executes, for ``app.run`` and for the worker alike (what
    it takes, ``RunClaims`` creates and leases)."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self.keeper = LeaseKeeper(runtime)
        self.calls = Calls()  # the threads in ``run`` now (``app.close`` waits for them)

    def close(self) -> None:
        """Stop renewing leases."""
        self.keeper.close()

    def run(
        self,
        wf: WorkflowDef,
        wid: str,
        payload: bytes,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        gone: threading.Event | None = None,
    ) -> RunRow:
        """Drive run ``wid`` from this thread until it has an answer; returns its row then
        (terminal or waiting on an operator). ``loop``: the caller's, for ``run_async``, and
        ``gone``, set once that caller stopped waiting: the run is then left, at its next
        wait, to a worker or the next ``app.run`` of it."""
        with self.calls.entered():
            inv, row = self.acquire(wf, wid, payload, create_first=True)
            while inv is not None:
                inv.loop, inv.caller_gone = loop, gone
                outcome = self.drive(inv, row)
                if outcome.status == OutcomeKind.ABORT:
                    assert outcome.error is not None
                    raise outcome.error
                if outcome.status in ENDED:  # as just recorded: no need to read it back
                    status = RunStatus(outcome.status.value)
                    return changed(row, status=status, output=outcome.output, error=outcome.record)
                inv, row = self.acquire(wf, wid, payload, loop=loop, gone=gone)
            return row

    async def run_async(self, wf: WorkflowDef, wid: str, payload: bytes) -> RunRow:
        """:meth:`run` from a coroutine: the workflow's async code runs on the caller's loop,
        the engine's blocking work in a thread of its own (``in_own_thread``)."""
        loop = asyncio.get_running_loop()
        install_task_factory(loop)
        gone = threading.Event()
        run = functools.partial(self.run, wf, wid, payload, loop=loop, gone=gone)
        try:
            return await in_own_thread(run, f"stalwart-run-{wid}")
        except asyncio.CancelledError:
            gone.set()  # nobody awaits the run: it goes on to its next wait, then is left
            raise

    def drive(
        self,
        inv: Invocation,
        row: RunRow,
        *,
        follow: Callable[[Invocation], None] | None = None,
    ) -> Outcome:
        """Execute a run this process holds until it ends, parks or is lost. An invocation
        that suspends on what has already arrived (``wake``) is followed at once by the next,
        on the same lease; ``follow`` sees each such next invocation before it runs."""
        try:
            while True:
                outcome = self.execute(inv, row)
                if outcome.status != OutcomeKind.WAKE:
                    return outcome
                inv, row = self._next(inv, follow)
        except Exception as exc:
            if not inv.abandoned:  # never a run left 'running' with nobody on it
                self.abandon(inv, exc)
            raise

    def _next(
        self, inv: Invocation, follow: Callable[[Invocation], None] | None
    ) -> tuple[Invocation, RunRow]:
        """The invocation that follows ``inv``, which woke as it suspended, on its lease."""
        row = self.row(inv.workflow_id)
        loop, gone = inv.loop, inv.caller_gone
        inv = self.invocation(inv.wf, row, recovering=False, owner=inv.owner)
        inv.loop, inv.caller_gone = loop, gone
        if follow is not None:
            follow(inv)
        return inv, row

    async def drive_async(
        self,
        inv: Invocation,
        row: RunRow,
        offload: Offload,
        *,
        follow: Callable[[Invocation], None] | None = None,
    ) -> Outcome:
        """:meth:`drive` of an async workflow's run as the current task, on the app's loop
        (a worker's): its first invocation takes no thread unless it ends otherwise than
        completed (``execute_async``); the invocations after a wake are driven in a thread
        (``offload``)."""
        try:
            outcome = await self.execute_async(inv, row, offload)
        except Exception as exc:
            if not inv.abandoned:  # never a run left 'running' with nobody on it
                await self._abandon_async(inv, exc, offload)
            raise
        if outcome.status != OutcomeKind.WAKE:
            return outcome

        def rest() -> Outcome:
            try:
                then, then_row = self._next(inv, follow)
            except Exception as exc:
                if not inv.abandoned:
                    self.abandon(inv, exc)
                raise
            return self.drive(then, then_row, follow=follow)

        return await offload(rest)

    async def execute_async(self, inv: Invocation, row: RunRow, offload: Offload) -> Outcome:
        """:meth:`execute` as the current task (``execute_async``)."""
        runtime = self.runtime
        self.keeper.hold(inv)
        begin(runtime, inv, row)
        status = OutcomeKind.ABORT.value
        try:
            try:
                with inv.observe.current() if inv.observe is not None else nullcontext():
                    outcome = await execute_async(runtime, inv, row.input, offload)
                status = outcome.status.value
            finally:
                self.keeper.drop(inv.workflow_id)
                end(inv, status)
        except BaseException as exc:
            if not inv.abandoned:
                await self._abandon_async(inv, exc, offload)
            raise
        if outcome.status == OutcomeKind.ABORT:
            await offload(self.abandon, inv, outcome.error)
        return outcome

    async def _abandon_async(self, inv: Invocation, exc: BaseException, offload: Offload) -> None:
        """``abandon`` from the run's task: in a thread, unless the app's loop is closing,
        which would stop before the thread's answer came back and leave the task (and the
        worker's slot) pending for good: then here, at once."""
        if self.runtime.loop.closing:
            self.abandon(inv, exc)
        else:
            await offload(self.abandon, inv, exc)

    def row(self, workflow_id: str) -> RunRow:
        """The run's row; ``WorkflowNotFound`` if there is none."""
        row = self.runtime.store.get_run(workflow_id)
        if row is None:
            raise WorkflowNotFound(
                f"no run with workflow_id {workflow_id!r} in {self.runtime.name}"
            )
        return row

    def execute(self, inv: Invocation, row: RunRow) -> Outcome:
        """One invocation of a run this process holds, with its lease kept alive meanwhile."""
        runtime = self.runtime
        self.keeper.hold(inv)
        begin(runtime, inv, row)
        status = OutcomeKind.ABORT.value
        try:
            with inv.observe.current() if inv.observe is not None else nullcontext():
                outcome = execute(runtime, inv, row.input)
            status = outcome.status.value
        except BaseException as exc:
            self.abandon(inv, exc)
            raise
        finally:
            self.keeper.drop(inv.workflow_id)
            end(inv, status)
        if outcome.status == OutcomeKind.ABORT:
            self.abandon(inv, outcome.error)
        return outcome

    def abandon(self, inv: Invocation, error: BaseException | None) -> None:
        """An invocation ended without recording an outcome: say so, and give its lease back
        so that the run is taken up again at once, not when the lease lapses."""
        inv.abandoned = True
        runtime = self.runtime
        try:
            runtime.store.release_lease(inv.workflow_id, owner=inv.owner, now=runtime.clock.time())
        except Exception as exc:  # it lapses instead: the run is taken up when it does
            released = f"releasing its lease failed too ({exc}): it is taken up when it lapses"
        else:
            released = "its lease was released"
        log.error(
            "run %s: stopped without recording an outcome (%s: %s); %s",
            inv.workflow_id,
            type(error).__name__,
            error,
            released,
        )

    def acquire(
        self,
        wf: WorkflowDef,
        wid: str,
        payload: bytes,
        *,
        create_first: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
        gone: threading.Event | None = None,
    ) -> tuple[Invocation | None, RunRow]:
        """Create the run holding its lease, or take over an existing run's lease.

        Returns no invocation when the run is already terminal or waits on an operator; waits
        while a live process holds the lease or the run waits on something. ``create_first``:
        try to create the run before looking for it (a new run then costs one transaction).
        ``loop`` and ``gone``: ``run``'s, for ``run_async`` (the children it executes run on
        that loop too, and it stops waiting, with a ``RuntimeError``, once its caller left).
        """
        runtime = self.runtime
        delay = WAIT_POLL_SECONDS
        look = not create_first
        while True:
            if loop is not None and (why := _left(loop, gone)) is not None:
                raise RuntimeError(f"run {wid!r} is left to a worker or the next app.run: {why}")
            now = runtime.clock.time()
            row = runtime.store.get_run(wid) if look else None
            look = True
            if row is None:
                created = self._create(wf, wid, payload, now)
                if created is not None:
                    return created
                continue
            if row.name != wf.name:
                raise WorkflowAlreadyExists(
                    f"run {wid!r} belongs to workflow {row.name!r}, not {wf.name!r}; use another "
                    "workflow_id"
                )
            if row.status in TERMINAL:
                return None, row
            if row.status == RunStatus.NEEDS_ATTENTION:
                return None, row  # for an operator: the caller raises NeedsAttention
            if self.claimable(row, now):
                taken = self.take(wf, row, now)
                if taken is not None:
                    return taken, row
                # another process was faster, or the run's queue is at its limit: wait a little
            if row.status == RunStatus.SUSPENDED and self.help_children(wid, loop, gone):
                continue  # app.run executes the children of its run that no worker took
            if (stuck := attention_below(self.runtime, row)) is not None:
                return None, stuck  # the caller raises the child's NeedsAttention
            if runtime.loop.closing:  # (app.close() waits for this thread)
                raise RuntimeError(
                    f"this stalwart app was closed while run {wid!r} waited; a worker, or the "
                    "next app.run of it on an open app, takes it up"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
            if row.status == RunStatus.SUSPENDED:
                delay = WAIT_POLL_SECONDS

    def help_children(
        self,
        parent_id: str,
        loop: asyncio.AbstractEventLoop | None = None,
        gone: threading.Event | None = None,
    ) -> bool:
        """Execute in this thread, each until it ends or parks, the descendants of
        ``parent_id`` that nobody holds (a worker that claimed one first keeps it); ``True``
        if any ran. ``app.run`` does it for its run's children no worker took (on the loop
        of ``app.run_async``'s caller, ``loop``, if any: its clients work in them too)."""
        runtime = self.runtime
        ran = False
        parents = [parent_id]
        while parents:
            for child in runtime.store.child_runs(parents.pop(0)):
                if child.status in TERMINAL:
                    continue
                parents.append(child.workflow_id)
                wf = runtime.registry.workflows.get(child.name)
                now = runtime.clock.time()
                if wf is None or not self.claimable(child, now):
                    continue
                inv = self.take(wf, child, now)
                if inv is None:
                    continue
                ran = True
                inv.loop, inv.caller_gone = loop, gone  # the parent's caller's loop, if any
                try:
                    self.drive(inv, child)
                except Exception as exc:  # the child's problem, not its parent's: say so, go on
                    log.error("run %s: child %s stopped: %s", parent_id, child.workflow_id, exc)
        return ran


def _left(loop: asyncio.AbstractEventLoop, gone: threading.Event | None) -> str | None:
    """Why a ``run_async`` run stops waiting in its thread, if it does."""
    if loop.is_closed():
        return "the event loop app.run_async was called on is closed"
    if gone is not None and gone.is_set():
        return "the caller of app.run_async stopped waiting for it"
    return None
