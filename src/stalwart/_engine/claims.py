"""Taking runs: create a run (``pending``, or held by this process), take a claimable run's
lease (a takeover of a run whose holder stopped is a recovery, which the poison rule may stop),
and build the invocation of a run this process holds. :class:`RunClaims` is the part of the
``Driver`` that does it (``driver.py`` drives what it takes)."""

from __future__ import annotations

from .._leases import holder_is_gone, worker_of
from .._model import RunStatus
from .._registry import WorkflowDef
from .._runtime import Runtime
from .._store import RunRow
from .._store.base import IndexRow, IngressCount, LeaseAsk, LeaseClaim, NewRun, ReplayState
from .._store.rows import as_kwargs
from .interrupted import last_seen
from .invocation import Invocation
from .lifecycle import lifecycle
from .observe import carried, took
from .poison import stop_poison_run

__all__ = ["RunClaims"]


class RunClaims:
    """Creating runs, taking their leases and building their invocations, for a ``Driver``."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def start(
        self,
        wf: WorkflowDef,
        wid: str,
        payload: bytes,
        *,
        queue: str | None,
        priority: int,
        count: IngressCount | None = None,
    ) -> bool:
        """Record a ``pending`` run for a worker; ``False`` (nothing written) if it exists.
        ``count``: the subscription that counts it as accepted, in the same transaction."""
        now = self.runtime.clock.time()
        queue = wf.queue if queue is None else queue
        created = self._insert(wf, wid, payload, now, queue=queue, priority=priority, count=count)
        self.runtime.wakeup.set()
        return created

    def start_all(
        self, wf: WorkflowDef, runs: list[tuple[str, bytes]], *, count: IngressCount | None
    ) -> list[bool]:
        """``start`` of each ``(workflow id, payload)`` of ``runs``, in one store call (one
        transaction); whether each was created."""
        if not runs:
            return []
        now = self.runtime.clock.time()
        created = self.runtime.store.create_runs(
            [
                self._new_run(wf, wid, payload, now, queue=wf.queue, count=count)
                for wid, payload in runs
            ]
        )
        self.runtime.wakeup.set()
        return created

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
        count: IngressCount | None = None,
    ) -> bool:
        """Create the run, ``pending``, or ``running`` and held by ``owner``; ``False`` if
        it exists already."""
        run = self._new_run(
            wf,
            wid,
            payload,
            now,
            queue=queue,
            priority=priority,
            owner=owner,
            until=until,
            count=count,
        )
        return self.runtime.store.create_run(**as_kwargs(run))

    def _new_run(
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
        count: IngressCount | None = None,
    ) -> NewRun:
        """The run to create: ``pending``, or ``running`` and held by ``owner``."""
        return NewRun(
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
            count=count,
        )

    def invocation(
        self,
        wf: WorkflowDef,
        row: RunRow,
        *,
        recovering: bool,
        owner: str,
        index: list[IndexRow] | None = None,
        state: ReplayState | None = None,
    ) -> Invocation:
        """An invocation of the run ``owner`` holds; ``index``: its journal when the caller
        knows it (a run it just created has none), or ``state`` (read with its claim), else
        it is read."""
        runtime = self.runtime
        rollback: bytes | None = None  # a run just created has none either
        if state is not None:
            index, rollback = state.index, state.rollback
        elif index is None:
            # a released run has one too; read with it, the rollback a crash interrupted
            state = runtime.store.replay_state(row.workflow_id)
            index, rollback = state.index, state.rollback
        inv = Invocation(runtime, wf, row.workflow_id, owner, recovering=recovering, index=index)
        inv.rollback_known, inv.rollback = True, rollback
        inv.deadline = row.deadline
        inv.retrying = row.retrying
        if recovering:
            inv.last_seen = last_seen(row)
        if row.cancel_requested:
            inv.cancel_requested.set()
        return inv

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
        inv = self.invocation(wf, row, recovering=False, owner=owner, index=[])
        inv.ties = False
        return inv, row

    def claimable(self, row: RunRow, now: float) -> bool:
        """Whether the run may be taken now (the store's one definition of it)."""
        gone = row.lease_owner is not None and holder_is_gone(row.lease_owner)
        return self.runtime.store.claimable(row.workflow_id, now=now, holder_gone=gone)

    def take(self, wf: WorkflowDef, row: RunRow, now: float) -> Invocation | None:
        """Take the lease of a claimable run; ``None`` if another process was faster."""
        ask = self._ask(row, now)
        return self._taken(wf, row, ask, self.runtime.store.take_lease(**as_kwargs(ask)))

    def take_all(
        self, runs: list[tuple[WorkflowDef, RunRow]], now: float
    ) -> tuple[list[Invocation | None], Exception | None]:
        """:meth:`take` of each run, from this thread, the claims sharing the store's
        transactions: what each took (``None`` where it failed), and the first error."""
        asks = [self._ask(row, now) for _wf, row in runs]
        claims = self.runtime.store.take_leases(asks)
        taken: list[Invocation | None] = []
        error: Exception | None = None
        for (wf, row), ask, claim in zip(runs, asks, claims, strict=True):
            try:  # a failed claim, or a failure after one: the others stand
                if isinstance(claim, Exception):
                    raise claim
                taken.append(self._taken(wf, row, ask, claim))
            except Exception as exc:
                taken.append(None)
                error = error or exc
        return taken, error

    def _ask(self, row: RunRow, now: float) -> LeaseAsk:
        """The claim of run ``row`` for this process."""
        runtime = self.runtime
        holder = row.lease_owner
        # A run left 'running' without a live holder was interrupted mid-flight: a recovery.
        recovering = row.status == RunStatus.RUNNING
        replaced = None if holder is None else worker_of(holder)  # as logs and workers() say
        detail = runtime.codec.encode({"recovered_from": replaced}) if recovering else None
        return LeaseAsk(
            row.workflow_id,
            owner=runtime.claim_owner(),
            expected_owner=holder,
            now=now,
            lease_until=now + runtime.lease_seconds,
            entry=lifecycle("resumed", now, output=detail),
            recovery=recovering,
            holder_gone=holder is not None and holder_is_gone(holder),
            limits=runtime.queues.get(row.queue),
            replay=True,
        )

    def _taken(
        self, wf: WorkflowDef, row: RunRow, ask: LeaseAsk, claim: LeaseClaim
    ) -> Invocation | None:
        """The invocation of a run whose claim ``ask`` decided ``claim``; ``None`` if not
        taken, or stopped by the poison rule."""
        if not claim.taken:
            return None
        holder, owner, recovering = row.lease_owner, ask.owner, ask.recovery
        replaced = None if holder is None else worker_of(holder)
        took(self.runtime, row, ask.now, holder=replaced, takeover=recovering)
        if recovering and claim.recoveries >= self.runtime.max_recoveries:
            go_on = stop_poison_run(self.runtime, row, claim.recoveries, owner)
            return self.invocation(wf, row, recovering=True, owner=owner) if go_on else None
        return self.invocation(wf, row, recovering=recovering, owner=owner, state=claim.replay)
