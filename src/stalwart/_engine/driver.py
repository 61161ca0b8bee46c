"""The run lifecycle, once: acquire a run (create it, take it over, wait for it), execute it
until it ends or parks, and stop a run that keeps killing its workers (``poison.py``).

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
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace

from .._errors import WorkflowAlreadyExists, WorkflowNotFound
from .._leases import holder_is_gone, worker_of
from .._model import (
    ENDED,
    TERMINAL,
    OutcomeKind,
    RunStatus,
)
from .._registry import WorkflowDef
from .._runtime import Runtime
from .._store import RunRow
from .._store.base import IndexRow
from .children import attention_below, help_children
from .executor import Outcome, execute
from .interrupted import last_seen
from .invocation import Invocation
from .keeper import LeaseKeeper
from .lifecycle import lifecycle
from .loop import install_task_factory
from .observe import begin, carried, end, took
from .poison import stop_poison_run

__all__ = ["Driver"]

log = logging.getLogger("stalwart")
WAIT_POLL_SECONDS = 0.02


class Driver:
    """Drives the runs this process executes, for ``app.run`` and for the worker alike."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.keeper = LeaseKeeper(runtime)

    def close(self) -> None:
        """Stop renewing leases."""
        self.keeper.close()

    def start(
        self, wf: WorkflowDef, wid: str, payload: bytes, *, queue: str | None, priority: int
    ) -> None:
        """Record a ``pending`` run for a worker (nothing, if the run already exists)."""
        now = self.runtime.clock.time()
        self._insert(
            wf, wid, payload, now, queue=wf.queue if queue is None else queue, priority=priority
        )
        self.runtime.wakeup.set()

    def _insert(
        self,
        wf: WorkflowDef,
        wid: str,
        payload: bytes,
        now: float,
        *,
        queue: str,
        priority: int = 0,
        owner: str | None = None,
        until: float | None = None,
    ) -> bool:
        """Create the run, ``pending``, or ``running`` and held by ``owner``; ``False`` if
        it exists already."""
        return self.runtime.store.create_run(
            workflow_id=wid,
            name=wf.name,
            status=RunStatus.PENDING if owner is None else RunStatus.RUNNING,
            queue=queue,
            priority=priority,
            input=payload,
            now=now,
            owner=owner,
            lease_until=until,
            entry=lifecycle("started", now, input=payload),
            deadline=None if wf.timeout is None else now + wf.timeout,
            trace_context=carried(self.runtime) if self.runtime.observers else None,
        )

    def run(
        self,
        wf: WorkflowDef,
        wid: str,
        payload: bytes,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> RunRow:
        """Drive run ``wid`` from this thread until it has an answer; returns its row then
        (terminal or waiting on an operator). ``loop``: the caller's, for ``run_async``."""
        inv, row = self.acquire(wf, wid, payload, create_first=True)
        while inv is not None:
            inv.loop = loop
            outcome = self.drive(inv, row)
            if outcome.status == OutcomeKind.ABORT:
                assert outcome.error is not None
                raise outcome.error
            if outcome.status in ENDED:  # as just recorded: no need to read it back
                status = RunStatus(outcome.status.value)
                return replace(row, status=status, output=outcome.output, error=outcome.record)
            inv, row = self.acquire(wf, wid, payload)
        return row

    async def run_async(self, wf: WorkflowDef, wid: str, payload: bytes) -> RunRow:
        """:meth:`run` from a coroutine: the workflow's async code runs on the caller's loop,
        the engine's blocking work in a thread."""
        loop = asyncio.get_running_loop()
        install_task_factory(loop)
        return await asyncio.to_thread(self.run, wf, wid, payload, loop=loop)

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
                row = self.row(inv.workflow_id)
                loop = inv.loop
                inv = self.invocation(inv.wf, row, recovering=False, owner=inv.owner)
                inv.loop = loop
                if follow is not None:
                    follow(inv)
        except Exception as exc:
            if not inv.abandoned:  # never a run left 'running' with nobody on it
                self.abandon(inv, exc)
            raise

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
        log.error(
            "run %s: stopped without recording an outcome (%s: %s); its lease was released",
            inv.workflow_id,
            type(error).__name__,
            error,
        )
        runtime = self.runtime
        try:
            runtime.store.release_lease(inv.workflow_id, owner=inv.owner, now=runtime.clock.time())
        except Exception as exc:
            log.error("run %s: releasing its lease failed too: %s", inv.workflow_id, exc)

    def invocation(
        self,
        wf: WorkflowDef,
        row: RunRow,
        *,
        recovering: bool,
        owner: str,
        index: list[IndexRow] | None = None,
    ) -> Invocation:
        """An invocation of the run ``owner`` holds; ``index``: its journal when the caller
        knows it (a run it just created has none), else it is read."""
        runtime = self.runtime
        if index is None:
            index = runtime.store.replay_index(row.workflow_id)  # a released run has one too
        inv = Invocation(runtime, wf, row.workflow_id, owner, recovering=recovering, index=index)
        inv.deadline = row.deadline
        inv.retrying = row.retrying
        if recovering:
            inv.last_seen = last_seen(row)
        if row.cancel_requested:
            inv.cancel_requested.set()
        return inv

    def acquire(
        self, wf: WorkflowDef, wid: str, payload: bytes, *, create_first: bool = False
    ) -> tuple[Invocation | None, RunRow]:
        """Create the run holding its lease, or take over an existing run's lease.

        Returns no invocation when the run is already terminal or waits on an operator; waits
        while a live process holds the lease or the run waits on something. ``create_first``:
        try to create the run before looking for it (a new run then costs one transaction).
        """
        runtime = self.runtime
        delay = WAIT_POLL_SECONDS
        look = not create_first
        while True:
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
            if row.status == RunStatus.SUSPENDED and help_children(self, wid):
                continue  # app.run executes the children of its run that no worker took
            if (stuck := attention_below(self.runtime, row)) is not None:
                return None, stuck  # the caller raises the child's NeedsAttention
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
            if row.status == RunStatus.SUSPENDED:
                delay = WAIT_POLL_SECONDS

    def _create(
        self, wf: WorkflowDef, wid: str, payload: bytes, now: float
    ) -> tuple[Invocation, RunRow] | None:
        """Create the run, held by this process, in one transaction; ``None`` if it exists
        already or its queue has limits (it is then created ``pending`` and waits for its
        turn like any other)."""
        runtime = self.runtime
        limited = wf.queue in runtime.queues
        owner = runtime.claim_owner()
        until = now + runtime.lease_seconds
        if limited:
            self._insert(wf, wid, payload, now, queue=wf.queue)
            return None
        if not self._insert(wf, wid, payload, now, queue=wf.queue, owner=owner, until=until):
            return None
        # What was just written, without reading it back; an encoded payload reads as its own
        # stored form (codec tags never look like payload references).
        row = RunRow(
            workflow_id=wid,
            name=wf.name,
            status=RunStatus.RUNNING,
            queue=wf.queue,
            priority=0,
            input=payload,
            output=None,
            error=None,
            created_at=now,
            updated_at=now,
            lease_owner=owner,
            lease_expires_at=until,
            deadline=None if wf.timeout is None else now + wf.timeout,
        )
        return self.invocation(wf, row, recovering=False, owner=owner, index=[]), row

    def claimable(self, row: RunRow, now: float) -> bool:
        """Whether the run may be taken now (the store's one definition of it)."""
        gone = row.lease_owner is not None and holder_is_gone(row.lease_owner)
        return self.runtime.store.claimable(row.workflow_id, now=now, holder_gone=gone)

    def take(self, wf: WorkflowDef, row: RunRow, now: float) -> Invocation | None:
        """Take the lease of a claimable run; ``None`` if another process was faster."""
        runtime = self.runtime
        holder = row.lease_owner
        # A run left 'running' without a live holder was interrupted mid-flight: a recovery.
        recovering = row.status == RunStatus.RUNNING
        replaced = None if holder is None else worker_of(holder)  # as logs and workers() say
        detail = runtime.codec.encode({"recovered_from": replaced}) if recovering else None
        owner = runtime.claim_owner()
        claim = runtime.store.take_lease(
            row.workflow_id,
            owner=owner,
            expected_owner=holder,
            now=now,
            lease_until=now + runtime.lease_seconds,
            entry=lifecycle("resumed", now, output=detail),
            recovery=recovering,
            holder_gone=holder is not None and holder_is_gone(holder),
            limits=runtime.queues.get(row.queue),
        )
        taken, crashes = claim.taken, claim.recoveries
        if not taken:
            return None
        took(runtime, row, now, holder=replaced, takeover=recovering)
        if recovering and crashes >= self.runtime.max_recoveries:
            go_on = stop_poison_run(self.runtime, row, crashes, owner)
            return self.invocation(wf, row, recovering=True, owner=owner) if go_on else None
        return self.invocation(wf, row, recovering=recovering, owner=owner)
