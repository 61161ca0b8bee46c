"""The app: a store, a registry of workflows and steps, and the client and operator calls."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from ._clock import Clock, SystemClock
from ._engine.executor import execute
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, Invocation
from ._engine.steps import call_step, call_step_async
from ._errors import (
    CorruptRecord,
    NeedsAttention,
    SerializationError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
    not_built,
)
from ._leases import holder_is_gone, new_owner
from ._model import (
    CANCELLED,
    COMPLETED,
    FAILED,
    NEEDS_ATTENTION,
    PENDING,
    RUNNING,
    STATUSES,
    TERMINAL,
    JournalEntry,
    WorkflowInfo,
    from_epoch,
    to_epoch,
)
from ._registry import Registry, StepDef, WorkflowDef
from ._retry import Retry
from ._serde import Codec, UnsupportedValue, argument_path, decode, make_codec
from ._store import Entry, RunRow, Store, open_store, resolve_url

__all__ = ["Handle", "Stalwart"]

log = logging.getLogger("stalwart")
F = TypeVar("F", bound=Callable[..., Any])
_MISSING: Any = object()


class _LeaseKeeper:
    """Renews the leases of the runs this process executes, in the background."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.held: dict[str, Invocation] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, inv: Invocation) -> None:
        with self._lock:
            self.held[inv.workflow_id] = inv
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="stalwart-leases", daemon=True
                )
                self._thread.start()

    def drop(self, workflow_id: str) -> None:
        with self._lock:
            self.held.pop(workflow_id, None)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval = max(0.05, self.core.lease_seconds / 3)
        while not self._wake.wait(interval):
            with self._lock:
                held = list(self.held.values())
            for inv in held:
                until = self.core.clock.time() + self.core.lease_seconds
                try:
                    ok = self.core.store.renew_lease(
                        inv.workflow_id, owner=inv.owner, lease_until=until
                    )
                except Exception:  # the store is unreachable: the next round tries again
                    log.warning("run %s: lease renewal failed", inv.workflow_id, exc_info=True)
                    continue
                if not ok:
                    inv.lease_lost.set()


@dataclass
class Core:
    """What the engine shares with the app: store, serializer, clock and policies."""

    store: Store
    codec: Codec
    clock: Clock
    lease_seconds: float
    registry: Registry
    rng: random.Random
    owner: str

    def __post_init__(self) -> None:
        self.keeper = _LeaseKeeper(self)


class StepFunction:
    """A declared step: journaled inside a workflow, a plain call anywhere else."""

    def __init__(self, app: Stalwart, step: StepDef) -> None:
        self._app = app
        self.definition = step
        functools.update_wrapper(self, step.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        step = self.definition
        inv = CURRENT_RUN.get()
        if inv is None or CURRENT_STEP.get() is not None or inv.core is not self._app._core:
            return step.fn(*args, **kwargs)
        step.check_arguments(args, kwargs)
        if step.is_async:
            if not inv.is_async:
                raise TypeError(
                    f"async step {step.name!r} was called from the sync workflow "
                    f"{inv.wf.name!r}; make the workflow 'async def' or the step a plain 'def'"
                )
            return call_step_async(inv, step, args, kwargs)
        return call_step(inv, step, args, kwargs)


class WorkflowFunction:
    """A declared workflow; calling it directly runs it as a plain function."""

    def __init__(self, app: Stalwart, wf: WorkflowDef) -> None:
        self._app = app
        self.definition = wf
        functools.update_wrapper(self, wf.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.definition.fn(*args, **kwargs)


class Handle:
    """A reference to one run."""

    def __init__(self, app: Stalwart, workflow_id: str) -> None:
        self._app = app
        self.workflow_id = workflow_id

    def __repr__(self) -> str:
        return f"Handle({self.workflow_id!r})"

    def status(self) -> str:
        """The run's current status."""
        return self._app._row(self.workflow_id).status

    def result(self, timeout: float | None = None) -> Any:
        """Wait until the run is terminal and return its result (or raise its failure)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while True:
            row = self._app._row(self.workflow_id)
            if row.status in TERMINAL:
                return self._app._outcome(row)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.workflow_id!r} is still {row.status} after {timeout}s"
                )
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 2, 0.5)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like :meth:`result`, without blocking the event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while True:
            row = await asyncio.to_thread(self._app._row, self.workflow_id)
            if row.status in TERMINAL:
                return self._app._outcome(row)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.workflow_id!r} is still {row.status} after {timeout}s"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def cancel(self) -> None:
        """Cancel the run (arrives with cancellation)."""
        self._app.cancel(self.workflow_id)


def _lifecycle(
    name: str, now: float, *, input: bytes | None = None, output: bytes | None = None
) -> Entry:
    return Entry(
        kind="run",
        name=name,
        status=COMPLETED,
        started_at=now,
        finished_at=now,
        input=input,
        output=output,
    )


def _error_text(error: str | None) -> str | None:
    if error is None:
        return None
    try:
        data = json.loads(error)
    except ValueError:
        return error
    if not isinstance(data, dict):
        return error
    return f"{data.get('type', 'Error')}: {data.get('message', '')}"


class Stalwart:
    """A stalwart app: declare workflows and steps on it, then run, start and inspect runs."""

    def __init__(
        self,
        url: str | None = None,
        *,
        durability: str = "process",
        lease_seconds: float = 30.0,
        max_recoveries: int = 5,
        serializer: str = "json",
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(lease_seconds, int | float) or lease_seconds <= 0:
            raise ValueError(f"lease_seconds={lease_seconds!r}: must be a number > 0")
        if not isinstance(max_recoveries, int) or max_recoveries < 1:
            raise ValueError(f"max_recoveries={max_recoveries!r}: must be an int >= 1")
        codec = make_codec(serializer)
        self.url = resolve_url(url)
        self.max_recoveries = max_recoveries
        store = open_store(self.url, durability=durability)
        self._core = Core(
            store=store,
            codec=codec,
            clock=clock or SystemClock(),
            lease_seconds=float(lease_seconds),
            registry=Registry(),
            rng=random.Random(),
            owner=new_owner(),
        )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop background renewals and release the store's connections."""
        self._core.keeper.close()
        self._core.store.close()

    def __enter__(self) -> Stalwart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- declarations ---------------------------------------------------------------------

    @overload
    def step(self, fn: F, /) -> F: ...
    @overload
    def step(
        self,
        fn: None = None,
        /,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
        irreversible: bool = False,
        verify: Callable[..., Any] | None = None,
        compensate: Callable[..., Any] | None = None,
        output: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Callable[[F], F]: ...

    def step(
        self,
        fn: Any = None,
        /,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
        irreversible: bool = False,
        verify: Callable[..., Any] | None = None,
        compensate: Callable[..., Any] | None = None,
        output: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Any:
        """Declare a step: journaled when called inside a workflow, retried by ``retry``."""
        if irreversible:
            raise not_built("@app.step(irreversible=True)", "irreversible effects")
        if verify is not None:
            raise not_built("@app.step(verify=...)", "irreversible effects")
        if compensate is not None:
            raise not_built("@app.step(compensate=...)", "compensation")
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry={retry!r}: pass a stalwart.Retry(...)")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout={timeout!r}: must be a number of seconds > 0")
        if output is not None and not callable(output):
            raise TypeError(f"output={output!r}: pass a pydantic model class or a callable")

        def decorate(func: Any) -> Any:
            if not callable(func):
                raise TypeError("@app.step decorates a function")
            step = StepDef(
                fn=func,
                name=name or func.__qualname__,
                retry=retry or Retry(),
                timeout=None if timeout is None else float(timeout),
                output=output,
                is_async=inspect.iscoroutinefunction(func),
            )
            self._core.registry.add_step(step)
            return StepFunction(self, step)

        return decorate(fn) if fn is not None else decorate

    @overload
    def workflow(self, fn: F, /) -> F: ...
    @overload
    def workflow(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        timeout: float | None = None,
    ) -> Callable[[F], F]: ...

    def workflow(
        self,
        fn: Any = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        timeout: float | None = None,
    ) -> Any:
        """Declare a workflow: durable, replayed from its journal after any interruption."""
        if timeout is not None:
            raise not_built("@app.workflow(timeout=...)", "durable waits and deadlines")
        if queue != "default":
            raise not_built("@app.workflow(queue=...)", "queues")

        def decorate(func: Any) -> Any:
            if not callable(func):
                raise TypeError("@app.workflow decorates a function")
            wf = WorkflowDef(
                fn=func,
                name=name or func.__qualname__,
                queue=queue,
                is_async=inspect.iscoroutinefunction(func),
            )
            self._core.registry.add_workflow(wf)
            return WorkflowFunction(self, wf)

        return decorate(fn) if fn is not None else decorate

    def queue(
        self,
        name: str,
        concurrency: int | None = None,
        rate: int | None = None,
        period: float = 1.0,
    ) -> None:
        """Declare a queue's limits (arrives with queues)."""
        raise not_built("app.queue(...)", "queues")

    # -- starting and running -------------------------------------------------------------

    def _definition(self, wf: Any) -> WorkflowDef:
        if isinstance(wf, WorkflowFunction):
            if wf._app is not self:
                raise TypeError(f"workflow {wf.definition.name!r} is declared on another app")
            return wf.definition
        if isinstance(wf, str):
            return self._core.registry.workflow(wf)
        raise TypeError(
            f"{wf!r} is not a workflow of this app: decorate it with @app.workflow or pass its name"
        )

    def _encode_args(self, wf: WorkflowDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        wf.signature.bind(*args, **kwargs)
        try:
            return self._core.codec.encode({"args": list(args), "kwargs": kwargs})
        except UnsupportedValue as exc:
            raise SerializationError(
                f"workflow {wf.name!r}: cannot serialize an argument of type {exc.type_name} at "
                f"{argument_path(exc.path)}; pass JSON-compatible values "
                "(or opt in with serializer='pickle')"
            ) from None

    def start(
        self,
        wf: Any,
        *args: Any,
        workflow_id: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> Handle:
        """Record a ``pending`` run for a worker to execute; an existing id returns its handle."""
        definition = self._definition(wf)
        if queue not in (None, "default"):
            raise not_built("app.start(queue=...)", "queues")
        if priority != 0:
            raise not_built("app.start(priority=...)", "queues")
        payload = self._encode_args(definition, args, kwargs)
        wid = workflow_id or uuid.uuid4().hex
        now = self._core.clock.time()
        self._core.store.create_run(
            workflow_id=wid,
            name=definition.name,
            status=PENDING,
            queue=definition.queue,
            priority=0,
            input=payload,
            now=now,
            owner=None,
            lease_until=None,
            entry=_lifecycle("started", now, input=payload),
        )
        return Handle(self, wid)

    def run(self, wf: Any, *args: Any, workflow_id: str | None = None, **kwargs: Any) -> Any:
        """Start (or resume) a run and execute it in this process until it is terminal."""
        definition = self._definition(wf)
        payload = self._encode_args(definition, args, kwargs)
        wid = workflow_id or uuid.uuid4().hex
        while True:
            inv, row = self._acquire(definition, wid, payload)
            if inv is None:
                return self._outcome(row)
            keeper = self._core.keeper
            keeper.hold(inv)
            try:
                outcome = execute(self._core, inv, row.input)
            except BaseException:
                self._core.store.release_lease(wid, owner=inv.owner, now=self._core.clock.time())
                raise
            finally:
                keeper.drop(wid)
            if outcome.status == "abort":
                self._core.store.release_lease(wid, owner=inv.owner, now=self._core.clock.time())
                assert outcome.error is not None
                raise outcome.error
            if outcome.status != "lease_lost":
                return self._outcome(self._row(wid))
            # Another process holds the run now: wait for it to finish or to vanish.

    async def run_async(
        self, wf: Any, *args: Any, workflow_id: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`run` for callers inside an event loop; the run executes on a worker thread."""
        return await asyncio.to_thread(
            functools.partial(self.run, wf, *args, workflow_id=workflow_id, **kwargs)
        )

    def _acquire(
        self, wf: WorkflowDef, wid: str, payload: bytes
    ) -> tuple[Invocation | None, RunRow]:
        """Create the run holding its lease, or take over an existing run's lease.

        Returns no invocation when the run is already terminal; waits while a live process
        holds the lease; raises ``NeedsAttention`` for a run waiting on an operator.
        """
        core = self._core
        delay = 0.01
        while True:
            now = core.clock.time()
            until = now + core.lease_seconds
            row = core.store.get_run(wid)
            if row is None:
                entry = _lifecycle("started", now, input=payload)
                if core.store.create_run(
                    workflow_id=wid,
                    name=wf.name,
                    status=RUNNING,
                    queue=wf.queue,
                    priority=0,
                    input=payload,
                    now=now,
                    owner=core.owner,
                    lease_until=until,
                    entry=entry,
                ):
                    invocation = Invocation(core, wf, wid, core.owner, recovering=False, index=[])
                    return invocation, self._row(wid)
                continue
            if row.name != wf.name:
                raise ValueError(
                    f"run {wid!r} belongs to workflow {row.name!r}, not {wf.name!r}; use another "
                    "workflow_id"
                )
            if row.status in TERMINAL:
                return None, row
            if row.status == NEEDS_ATTENTION:
                self._outcome(row)  # raises NeedsAttention
            holder = row.lease_owner
            expired = row.lease_expires_at is not None and row.lease_expires_at <= now
            if holder is None or expired or holder_is_gone(holder):
                # A run left 'running' without a holder was interrupted mid-flight: a recovery.
                recovering = row.status == RUNNING
                detail = core.codec.encode({"recovered_from": holder}) if recovering else None
                taken, crashes = core.store.take_lease(
                    wid,
                    owner=core.owner,
                    expected_owner=holder,
                    now=now,
                    lease_until=until,
                    entry=_lifecycle("resumed", now, output=detail),
                    recovery=recovering,
                )
                if taken:
                    if recovering:
                        log.info("run %s: recovering after its holder %s stopped", wid, holder)
                    if crashes >= self.max_recoveries:
                        return None, self._fail_poison_run(wid, crashes)
                    index = core.store.replay_index(wid)
                    invocation = Invocation(
                        core, wf, wid, core.owner, recovering=recovering, index=index
                    )
                    return invocation, row
                continue
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _fail_poison_run(self, wid: str, crashes: int) -> RunRow:
        """Dead-letter a run whose worker died at the same point ``crashes`` times in a row."""
        now = self._core.clock.time()
        error = json.dumps(
            {
                "type": "WorkerCrashed",
                "message": f"crashed its worker {crashes} times: each recovery found it where "
                "the last one left it, so it was failed instead of crash-looping the fleet "
                f"(max_recoveries={self.max_recoveries})",
            }
        )
        entry = Entry(
            kind="run",
            name="finished",
            status=FAILED,
            started_at=now,
            finished_at=now,
            error=error,
        )
        self._core.store.finish_run(
            wid,
            owner=self._core.owner,
            status=FAILED,
            output=None,
            error=error,
            now=now,
            entry=entry,
        )
        log.warning("run %s: failed after crashing its worker %d times", wid, crashes)
        return self._row(wid)

    # -- observing ------------------------------------------------------------------------

    def _row(self, workflow_id: str) -> RunRow:
        row = self._core.store.get_run(workflow_id)
        if row is None:
            raise WorkflowNotFound(f"no run with workflow_id {workflow_id!r} in {self.url}")
        return row

    def _outcome(self, row: RunRow) -> Any:
        if row.status == COMPLETED:
            try:
                value = decode(self._core.store.load_payload(row.output)) if row.output else None
            except (ValueError, CorruptRecord) as exc:
                raise CorruptRecord(
                    f"run {row.workflow_id!r}: its recorded result cannot be decoded ({exc})",
                    workflow_id=row.workflow_id,
                ) from exc
            wf = self._core.registry.workflows.get(row.name)
            return wf.restore(value) if wf is not None and wf.restore else value
        error = json.loads(row.error) if row.error else {}
        if row.status == FAILED:
            raise WorkflowFailed(
                row.workflow_id, error.get("type", "Error"), error.get("message", "")
            )
        if row.status == CANCELLED:
            raise WorkflowCancelled(f"run {row.workflow_id!r} was cancelled")
        if row.status == NEEDS_ATTENTION:
            reason = error.get("reason") or error.get("message", "")
            raise NeedsAttention(
                f"run {row.workflow_id!r} needs attention: {reason}",
                workflow_id=row.workflow_id,
                reason=reason,
            )
        raise RuntimeError(f"run {row.workflow_id!r} is {row.status}, not finished")

    def handle(self, workflow_id: str) -> Handle:
        """A handle on an existing run; :class:`WorkflowNotFound` if there is none."""
        self._row(workflow_id)
        return Handle(self, workflow_id)

    def list_workflows(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        before: Any = None,
    ) -> list[WorkflowInfo]:
        """Runs, newest first; pass the last one's ``created_at`` as ``before`` to page back."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"status={status!r}: use one of {', '.join(STATUSES)}")
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit={limit!r}: must be an int >= 1")
        rows = self._core.store.list_runs(
            status=status,
            name=name,
            limit=limit,
            before=None if before is None else to_epoch(before),
        )
        return [
            WorkflowInfo(
                workflow_id=r.workflow_id,
                name=r.name,
                status=r.status,
                queue=r.queue,
                created_at=from_epoch(r.created_at),  # type: ignore[arg-type]
                updated_at=from_epoch(r.updated_at),  # type: ignore[arg-type]
                error=_error_text(r.error),
            )
            for r in rows
        ]

    def journal(self, workflow_id: str) -> list[JournalEntry]:
        """The run's audit trail: every step, attempt and lifecycle event, in order."""
        self._row(workflow_id)
        entries = []
        for row in self._core.store.journal(workflow_id):
            values = []
            for label, stored in (("input", row.input), ("output", row.output)):
                try:
                    values.append(decode(stored) if stored is not None else None)
                except ValueError as exc:
                    raise CorruptRecord(
                        f"run {workflow_id!r}, seq {row.seq} ({row.kind} {row.name!r}): the "
                        f"recorded {label} cannot be decoded ({exc})",
                        workflow_id=workflow_id,
                        seq=row.seq,
                    ) from exc
            entries.append(
                JournalEntry(
                    seq=row.seq,
                    kind=row.kind,
                    name=row.name,
                    status=row.status,
                    attempt=row.attempt,
                    started_at=from_epoch(row.started_at),
                    finished_at=from_epoch(row.finished_at),
                    input=values[0],
                    output=values[1],
                    error=_error_text(row.error),
                    by=row.by,
                )
            )
        return entries

    # -- operator calls that arrive with later releases --------------------------------------

    def serve(self, concurrency: int | None = None, queues: list[str] | None = None) -> None:
        """Run a worker in this process (arrives with workers)."""
        raise not_built("app.serve()", "workers")

    def send_event(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        dedup_key: str | None = None,
        by: str | None = None,
    ) -> None:
        """Send an event to a run (arrives with durable waits)."""
        raise not_built("app.send_event()", "durable waits")

    def approvals(self, pending: bool = True) -> list[Any]:
        """Approval requests (arrives with durable waits)."""
        raise not_built("app.approvals()", "durable waits")

    def approve(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        """Approve a pending request (arrives with durable waits)."""
        raise not_built("app.approve()", "durable waits")

    def reject(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        """Reject a pending request (arrives with durable waits)."""
        raise not_built("app.reject()", "durable waits")

    def cancel(self, workflow_id: str, by: str | None = None) -> None:
        """Cancel a run (arrives with cancellation)."""
        raise not_built("app.cancel()", "cancellation")

    def retry(self, workflow_id: str, by: str | None = None) -> None:
        """Redrive a failed run (arrives with dead-letter redrive)."""
        raise not_built("app.retry()", "dead-letter redrive")

    def resolve(
        self,
        workflow_id: str,
        seq: int,
        result: Any = _MISSING,
        rerun: bool = False,
        by: str | None = None,
    ) -> None:
        """Settle an in-doubt irreversible step (arrives with irreversible effects)."""
        raise not_built("app.resolve()", "irreversible effects")

    def fork(
        self,
        workflow_id: str,
        from_seq: int,
        new_id: str | None = None,
        allow_reexecute: bool = False,
        by: str | None = None,
    ) -> Handle:
        """Fork a run from a journal position (arrives with fork)."""
        raise not_built("app.fork()", "fork")
