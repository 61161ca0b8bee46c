"""The app: a store, a registry of workflows and steps, and the client and operator calls."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import getpass
import inspect
import itertools
import json
import logging
import os
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from ._clock import Clock, ServerClock
from ._engine.compensation import Undo, interruption, pending_compensations
from ._engine.executor import Outcome, execute, rollback_state
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, Invocation, step_key
from ._engine.loop import AppLoop, install_task_factory
from ._engine.steps import call_step, call_step_async
from ._errors import (
    CorruptRecord,
    InvalidOperation,
    NeedsAttention,
    SerializationError,
    UnsafeFork,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
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
    SUSPENDED,
    TERMINAL,
    Approval,
    ApprovalRequest,
    JournalEntry,
    WorkflowInfo,
    from_epoch,
    to_epoch,
)
from ._registry import Registry, StepDef, WorkflowDef
from ._retry import Retry
from ._serde import Codec, UnsupportedValue, argument_path, make_codec
from ._store import Entry, RunRow, Store, open_store, resolve_url
from ._store.base import ApprovalRow, ForkCandidate, IndexRow, QueueLimits

__all__ = ["Handle", "Stalwart"]

log = logging.getLogger("stalwart")
CANCEL_POLL_SECONDS = 0.25
WAIT_POLL_SECONDS = 0.02
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
        self.start()

    def start(self) -> None:
        """Start the renewal thread (once)."""
        with self._lock:
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
        renew_every = max(0.05, self.core.lease_seconds / 3)
        next_renewal = time.monotonic() + renew_every
        while not self._wake.wait(CANCEL_POLL_SECONDS):
            with self._lock:
                held = list(self.held.values())
            if not held:
                continue
            try:
                cancelled = self.core.store.cancel_requested_for(self.core.owner + "#")
            except Exception:
                log.warning("cancel poll failed", exc_info=True)
                cancelled = set()
            for inv in held:
                if inv.workflow_id in cancelled:
                    inv.cancel_requested.set()
            if time.monotonic() < next_renewal:
                continue
            next_renewal = time.monotonic() + renew_every
            for inv in held:
                until = self.core.clock.time() + self.core.lease_seconds
                try:
                    ok = self.core.store.renew_lease(
                        inv.workflow_id, owner=inv.owner, lease_until=until
                    )
                except Exception:  # the store is unreachable: the next round tries again
                    log.warning("run %s: lease renewal failed", inv.workflow_id, exc_info=True)
                    continue
                if ok is None:
                    inv.lease_lost.set()
                elif ok:
                    inv.cancel_requested.set()


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
    queues: dict[str, QueueLimits] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self._claims = itertools.count(1)
        core = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _call_if_alive(core, "_forked"))
        self.keeper = _LeaseKeeper(self)
        self.loop = AppLoop()  # every async run of this app in this process runs on it
        self.wakeup = threading.Event()  # set when this process changes something to claim
        self.settled = threading.Condition()  # notified when this process ends or parks a run
        self.settled_count = 0

    def _forked(self) -> None:
        """In a forked child: a process of its own, so an owner of its own."""
        self.owner = new_owner()
        self._claims = itertools.count(1)
        self.loop.forget()

    def note_settled(self) -> None:
        """A run this process executed finished or suspended: wake callers waiting on it."""
        with self.settled:
            self.settled_count += 1
            self.settled.notify_all()

    def claim_owner(self) -> str:
        """A lease owner for one claim: this process and app, and which claim it is, so that
        two claims of one run by the same app can never both write."""
        return f"{self.owner}#{next(self._claims)}"


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
        core = self._app._core
        watch = _Watch(core)
        while True:
            if watch.should_read():
                row = self._app._row(self.workflow_id)
                if self._finished(row, deadline, timeout):
                    return self._app._outcome(row)
            elif deadline is not None and time.monotonic() >= deadline:
                self._finished(self._app._row(self.workflow_id), deadline, timeout)
            pause = watch.pause(deadline)
            with core.settled:
                core.settled.wait_for(lambda: core.settled_count != watch.settled, pause)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Like :meth:`result`, without blocking the event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = _Watch(self._app._core)
        while True:
            if await asyncio.to_thread(watch.should_read):
                row = await asyncio.to_thread(self._app._row, self.workflow_id)
                if self._finished(row, deadline, timeout):
                    return self._app._outcome(row)
            elif deadline is not None and time.monotonic() >= deadline:
                row = await asyncio.to_thread(self._app._row, self.workflow_id)
                self._finished(row, deadline, timeout)
            await asyncio.sleep(watch.pause(deadline))

    def _finished(self, row: RunRow, deadline: float | None, timeout: float | None) -> bool:
        if row.status in TERMINAL:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run {self.workflow_id!r} is still {row.status} after {timeout}s")
        return False

    def cancel(self) -> None:
        """Cancel the run: at once if it waits, else at its next step boundary."""
        self._app.cancel(self.workflow_id)


class _Watch:
    """When a waiting caller looks at a run again.

    Pauses grow from 1 ms to 50 ms, cut short when a run of this process settles. After
    each, a change signal (a run this process settled, SQLite's ``data_version`` for other
    processes' commits, PostgreSQL's notifications) triggers a look; without one the caller
    looks anyway at intervals doubling from 1 ms to half a second, so a run is seen soon
    after it ends while a long wait stays cheap.
    """

    FIRST = 0.001
    LONGEST = 0.05
    IDLE = 0.5

    def __init__(self, core: Core) -> None:
        self.core = core
        self.delay = self.FIRST
        self.settled = -1
        self.version: int | None = None
        self.last_read = -self.IDLE
        self.read_every = 0.0

    def should_read(self) -> bool:
        """Whether the run may have changed since the last look."""
        now = time.monotonic()
        settled, version = self.core.settled_count, self.core.store.data_version()
        changed = version != self.version or settled != self.settled
        self.settled, self.version = settled, version
        if changed:
            self.last_read = now
            return True
        if now - self.last_read >= self.read_every:
            self.last_read = now
            self.read_every = min(max(self.read_every * 2, self.FIRST), self.IDLE)
            return True
        return False

    def pause(self, deadline: float | None) -> float:
        """The next pause, never past ``deadline``."""
        delay = self.delay
        self.delay = min(self.delay * 1.5, self.LONGEST)
        if deadline is None:
            return delay
        return min(delay, max(0.0, deadline - time.monotonic()))


def _call_if_alive(ref: weakref.ref[Any], method: str) -> None:
    target = ref()
    if target is not None:
        getattr(target, method)()


def _fork_plan(
    rows: list[ForkCandidate], from_seq: int
) -> tuple[list[int], list[tuple[int, str]], list[tuple[int, str]]]:
    """Pure: the row ids a fork from ``from_seq`` reuses (the latest completed row of each
    position before it, and the mark of an irreversible step's first attempt, so that a fork
    of the fork still knows the step is irreversible), the completed irreversible steps it
    would run again, and the irreversible steps in doubt (latest row ``scheduled`` with no
    outcome, or ``in_doubt``) anywhere in the journal: the fork would run them again under
    its own idempotency key, whether they lie before ``from_seq`` (not reusable) or after."""
    latest: dict[str, ForkCandidate] = {}
    marks: dict[int, int] = {}  # seq of an irreversible step -> its first marking row
    for row in rows:
        row_id, seq, position, kind, status = row.id, row.seq, row.position, row.kind, row.status
        latest[position] = row
        if kind == "step" and status in ("scheduled", "in_doubt"):
            marks.setdefault(seq, row_id)
    reuse: list[int] = []
    again: list[tuple[int, str]] = []
    doubtful: list[tuple[int, str]] = []
    for row in latest.values():
        row_id, seq, kind, name, status = row.id, row.seq, row.kind, row.name, row.status
        done = status in ("completed", "reused")
        if kind == "step" and status in ("scheduled", "in_doubt"):
            doubtful.append((seq, name))
        elif seq < from_seq and done:
            reuse.append(row_id)
            if seq in marks:
                reuse.append(marks[seq])
        elif seq >= from_seq and done and kind == "step" and seq in marks:
            again.append((seq, name))
    return sorted(reuse), sorted(again), sorted(doubtful)


def _journal_key(workflow_id: str, kind: str, status: str, position: str | None) -> str | None:
    """The idempotency key a journal row's step or compensation used, derived from its stored
    position as the step saw it; ``None`` for other rows and for rows a fork reused (their step
    ran in the source run, under its key)."""
    if position is None or status == "reused":
        return None
    if kind == "step":
        return step_key(workflow_id, position)
    if kind == "compensation":
        return step_key(workflow_id, position, "/undo")
    return None


def _failed_for_good(index: list[IndexRow], *, interrupted: bool = False) -> list[IndexRow]:
    """The step positions whose latest journal row is a final failure (and, for a poison run,
    ``interrupted``, the steps whose crashes used up its recoveries)."""
    latest: dict[str, IndexRow] = {}
    for row in index:
        latest[row.position] = row
    failed = []
    for row in latest.values():
        if row.kind == "step" and row.status == FAILED and row.error:
            with contextlib.suppress(ValueError):
                detail = json.loads(row.error)
                crashed = interrupted and detail.get("type") == "AttemptInterrupted"
                if detail.get("final") or crashed:
                    failed.append(row)
    return failed


_SYNC_IRREVERSIBLE_TIMEOUT = (
    "an irreversible step with timeout= must be 'async def': a sync step cannot be stopped, "
    "so its abandoned attempt could still take effect after the next one; drop timeout= or "
    "make the step async"
)


def _default_clock(store: Store) -> Clock:
    """The system clock; on a store shared by machines, corrected to the server's clock."""
    return ServerClock(store.clock_offset)


MAX_ID_LENGTH = 512


def _new_id(given: Any, *, label: str = "workflow_id") -> str:
    """``given`` checked as a run id, or a fresh one."""
    if given is None:
        return uuid.uuid4().hex
    if not isinstance(given, str) or not given or len(given) > MAX_ID_LENGTH:
        shown = given if not isinstance(given, str) else f"{given[:40]!r}... ({len(given)} chars)"
        raise ValueError(
            f"{label}={shown if len(repr(given)) > 60 else repr(given)}: a run id is a non-empty "
            f"string of at most {MAX_ID_LENGTH} characters"
        )
    return given


def _check_queue_name(queue: Any) -> None:
    if not isinstance(queue, str) or not queue or len(queue) > 200:
        raise ValueError(f"queue={queue!r}: a queue is named by a non-empty string")


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


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


def _run_error(row: RunRow) -> dict[str, Any]:
    """The run's recorded error as a record (empty when it has none)."""
    if not row.error:
        return {}
    try:
        error = json.loads(row.error)
    except ValueError:
        error = None
    if not isinstance(error, dict):
        raise CorruptRecord(
            f"run {row.workflow_id!r}: its recorded error {row.error[:80]!r} cannot be decoded; "
            "restore the row from a backup",
            workflow_id=row.workflow_id,
        )
    return error


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
            clock=clock or _default_clock(store),
            lease_seconds=float(lease_seconds),
            registry=Registry(),
            rng=random.Random(),
            owner=new_owner(),
        )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop background renewals and release the store's connections."""
        self._core.keeper.close()
        self._core.loop.close()
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
        if (
            irreversible
            and timeout is not None
            and fn is not None
            and not (inspect.iscoroutinefunction(fn))
        ):
            raise ValueError(_SYNC_IRREVERSIBLE_TIMEOUT)
        if verify is not None and not irreversible:
            raise ValueError("verify= checks an irreversible step: add irreversible=True")
        if verify is not None and (not callable(verify) or inspect.iscoroutinefunction(verify)):
            raise TypeError("verify= must be a plain function (def) taking the step's arguments")
        if compensate is not None and not callable(compensate):
            raise TypeError("compensate= must be a function taking (result, *args, **kwargs)")
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry={retry!r}: pass a stalwart.Retry(...)")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout={timeout!r}: must be a number of seconds > 0")
        if output is not None and not callable(output):
            raise TypeError(f"output={output!r}: pass a pydantic model class or a callable")

        def decorate(func: Any) -> Any:
            if not callable(func):
                raise TypeError("@app.step decorates a function")
            if irreversible and timeout is not None and not inspect.iscoroutinefunction(func):
                raise ValueError(_SYNC_IRREVERSIBLE_TIMEOUT)
            policy = retry or Retry()
            if irreversible and verify is None:
                # Never re-executed blindly: without verify there is no second attempt.
                policy = dataclasses.replace(policy, max_attempts=1)
            step = StepDef(
                fn=func,
                name=name or func.__qualname__,
                retry=policy,
                irreversible=bool(irreversible),
                verify=verify,
                compensate=compensate,
                undo_retry=retry or Retry(),
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
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ValueError(f"timeout={timeout!r}: must be a number of seconds > 0")
        _check_queue_name(queue)

        def decorate(func: Any) -> Any:
            if not callable(func):
                raise TypeError("@app.workflow decorates a function")
            wf = WorkflowDef(
                fn=func,
                name=name or func.__qualname__,
                queue=queue,
                is_async=inspect.iscoroutinefunction(func),
                timeout=None if timeout is None else float(timeout),
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
        """Declare a queue's limits, which every worker of this app applies fleet-wide.

        At most ``concurrency`` runs of the queue execute at once across all workers (a run
        suspended on a wait holds no slot), and at most ``rate`` runs start per ``period``
        seconds. Declaring a queue again replaces its limits.
        """
        _check_queue_name(name)
        for label, value in (("concurrency", concurrency), ("rate", rate)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"app.queue({name!r}): {label}={value!r} must be an int or None")
            if value is not None and value < 1:
                raise ValueError(f"app.queue({name!r}): {label}={value!r} must be >= 1 or None")
        if isinstance(period, bool) or not isinstance(period, int | float) or period <= 0:
            raise ValueError(f"app.queue({name!r}): period={period!r} must be seconds > 0")
        self._core.queues[name] = QueueLimits(concurrency, rate, float(period))

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
        if queue is not None:
            _check_queue_name(queue)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority={priority!r}: must be an int (higher runs first)")
        if not -(2**31) <= priority <= 2**31 - 1:
            raise ValueError(
                f"priority={priority}: pass an int in [-2**31, 2**31 - 1] (higher runs first)"
            )
        payload = self._encode_args(definition, args, kwargs)
        wid = _new_id(workflow_id)
        now = self._core.clock.time()
        self._core.store.create_run(
            workflow_id=wid,
            name=definition.name,
            status=PENDING,
            queue=definition.queue if queue is None else queue,
            priority=priority,
            input=payload,
            now=now,
            owner=None,
            lease_until=None,
            entry=_lifecycle("started", now, input=payload),
            deadline=None if definition.timeout is None else now + definition.timeout,
        )
        self._core.wakeup.set()
        return Handle(self, wid)

    def run(self, wf: Any, *args: Any, workflow_id: str | None = None, **kwargs: Any) -> Any:
        """Start (or resume) a run and execute it in this process until it is terminal.

        While the run waits on a timer, an event or an approval it holds no lease: this call
        blocks until the wait is over, then continues the run itself.
        """
        definition = self._definition(wf)
        if definition.is_async and _loop_running():
            raise TypeError(
                f"app.run() of the async workflow {definition.name!r} was called inside a running "
                "event loop; use 'await app.run_async(...)' there"
            )
        return self._run(definition, args, kwargs, workflow_id, loop=None)

    async def run_async(
        self, wf: Any, *args: Any, workflow_id: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`run` for callers inside an event loop: the workflow's async code runs on
        the caller's loop (so loop-bound clients of the caller work in it), and the engine's
        own blocking work on a thread."""
        definition = self._definition(wf)
        loop = asyncio.get_running_loop()
        install_task_factory(loop)
        return await asyncio.to_thread(
            functools.partial(self._run, definition, args, kwargs, workflow_id, loop=loop)
        )

    def _run(
        self,
        definition: WorkflowDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        workflow_id: str | None,
        *,
        loop: asyncio.AbstractEventLoop | None,
    ) -> Any:
        payload = self._encode_args(definition, args, kwargs)
        wid = _new_id(workflow_id)
        inv, row = self._acquire(definition, wid, payload)
        while True:
            if inv is None:
                return self._outcome(row)
            inv.loop = loop
            outcome = self._execute(inv, row)
            if outcome.status == "abort":
                assert outcome.error is not None
                raise outcome.error
            if outcome.status in TERMINAL or outcome.status == NEEDS_ATTENTION:
                return self._outcome(self._row(wid))
            if outcome.status == "wake":  # still held: what it waits for has arrived
                row = self._row(wid)
                inv = self._invocation(definition, row, recovering=False, owner=inv.owner)
                continue
            inv, row = self._acquire(definition, wid, payload)

    def _execute(self, inv: Invocation, row: RunRow) -> Outcome:
        """One invocation of a run this process holds, with its lease kept alive meanwhile."""
        core = self._core
        core.keeper.hold(inv)
        try:
            outcome = execute(core, inv, row.input)
        except BaseException as exc:
            self._abandon(inv, exc)
            raise
        finally:
            core.keeper.drop(inv.workflow_id)
        if outcome.status == "abort":
            self._abandon(inv, outcome.error)
        return outcome

    def _abandon(self, inv: Invocation, error: BaseException | None) -> None:
        """An invocation ended without recording an outcome: say so, and give its lease back
        so that the run is taken up again at once, not when the lease lapses."""
        inv.abandoned = True
        log.error(
            "run %s: stopped without recording an outcome (%s: %s); its lease was released",
            inv.workflow_id,
            type(error).__name__,
            error,
        )
        core = self._core
        try:
            core.store.release_lease(inv.workflow_id, owner=inv.owner, now=core.clock.time())
        except Exception as exc:
            log.error("run %s: releasing its lease failed too: %s", inv.workflow_id, exc)

    def _invocation(
        self, wf: WorkflowDef, row: RunRow, *, recovering: bool, owner: str
    ) -> Invocation:
        core = self._core
        index = core.store.replay_index(row.workflow_id)  # a released run has a journal too
        inv = Invocation(core, wf, row.workflow_id, owner, recovering=recovering, index=index)
        inv.deadline = row.deadline
        inv.retrying = row.retrying
        if row.cancel_requested:
            inv.cancel_requested.set()
        return inv

    def _acquire(
        self, wf: WorkflowDef, wid: str, payload: bytes
    ) -> tuple[Invocation | None, RunRow]:
        """Create the run holding its lease, or take over an existing run's lease.

        Returns no invocation when the run is already terminal; waits while a live process
        holds the lease or the run waits on something; raises ``NeedsAttention`` for a run
        waiting on an operator.
        """
        core = self._core
        delay = WAIT_POLL_SECONDS
        while True:
            now = core.clock.time()
            until = now + core.lease_seconds
            row = core.store.get_run(wid)
            if row is None:
                # A run of a queue with limits starts pending and waits for its turn like any
                # other; without limits it is created already held, in one transaction.
                limited = wf.queue in core.queues
                owner = core.claim_owner()
                deadline = None if wf.timeout is None else now + wf.timeout
                if (
                    core.store.create_run(
                        workflow_id=wid,
                        name=wf.name,
                        status=PENDING if limited else RUNNING,
                        queue=wf.queue,
                        priority=0,
                        input=payload,
                        now=now,
                        owner=None if limited else owner,
                        lease_until=None if limited else until,
                        entry=_lifecycle("started", now, input=payload),
                        deadline=deadline,
                    )
                    and not limited
                ):
                    row = self._row(wid)
                    return self._invocation(wf, row, recovering=False, owner=owner), row
                continue
            if row.name != wf.name:
                raise WorkflowAlreadyExists(
                    f"run {wid!r} belongs to workflow {row.name!r}, not {wf.name!r}; use another "
                    "workflow_id"
                )
            if row.status in TERMINAL:
                return None, row
            if row.status == NEEDS_ATTENTION:
                self._outcome(row)  # raises NeedsAttention
            if self._claimable(row, now):
                taken = self._take(wf, row, now)
                if taken is not None:
                    return taken, row
                # another process was faster, or the run's queue is at its limit: wait a little
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
            if row.status == SUSPENDED:
                delay = WAIT_POLL_SECONDS

    def _claimable(self, row: RunRow, now: float) -> bool:
        gone = row.lease_owner is not None and holder_is_gone(row.lease_owner)
        return self._core.store.claimable(row.workflow_id, now=now, holder_gone=gone)

    def _take(self, wf: WorkflowDef, row: RunRow, now: float) -> Invocation | None:
        """Take the lease of a claimable run; ``None`` if another process was faster."""
        core = self._core
        holder = row.lease_owner
        # A run left 'running' without a live holder was interrupted mid-flight: a recovery.
        recovering = row.status == RUNNING
        detail = core.codec.encode({"recovered_from": holder}) if recovering else None
        owner = core.claim_owner()
        claim = core.store.take_lease(
            row.workflow_id,
            owner=owner,
            expected_owner=holder,
            now=now,
            lease_until=now + core.lease_seconds,
            entry=_lifecycle("resumed", now, output=detail),
            recovery=recovering,
            holder_gone=holder is not None and holder_is_gone(holder),
            limits=core.queues.get(row.queue),
        )
        taken, crashes = claim.taken, claim.recoveries
        if not taken:
            return None
        if recovering:
            log.info(
                "run %s: recovering: its holder %s stopped or its lease lapsed",
                row.workflow_id,
                holder,
            )
            if crashes >= self.max_recoveries:
                return self._fail_poison_run(wf, row, crashes, owner)
        return self._invocation(wf, row, recovering=recovering, owner=owner)

    def _fail_poison_run(
        self, wf: WorkflowDef, row: RunRow, crashes: int, owner: str
    ) -> Invocation | None:
        """Stop a run whose worker died at the same point ``crashes`` times in a row.

        A run with completed compensable steps is rolled back like any failure before it is
        failed: the invocation returned runs its compensations and then ends it ``failed``.
        A run whose rollback itself keeps crashing its worker goes to ``needs_attention``
        (never to ``failed`` with compensations still pending). Otherwise it is failed now
        and ``None`` is returned."""
        core = self._core
        wid = row.workflow_id
        now = core.clock.time()
        try:
            plan = pending_compensations(
                core.store.compensation_plan(wid), codec=core.codec, workflow_id=wid
            )
            rollback = core.store.rollback_in_progress(wid)
            then = None if rollback is None else rollback_state(core, wid, rollback)[0]
        except CorruptRecord as exc:
            detail = json.dumps(
                {"type": "CorruptRecord", "message": str(exc), "reason": str(exc), "seq": exc.seq}
            )
            self._finish_poisoned(wid, NEEDS_ATTENTION, detail, owner, now)
            log.error("run %s: %s", wid, exc)
            return None
        if rollback is not None:
            if not plan:  # only the rollback's ending is left to record
                return self._invocation(wf, row, recovering=True, owner=owner)
            state = {"then": then}
            self._rollback_crashed(wid, plan[0], state=state, crashes=crashes, owner=owner, now=now)
            return None
        if plan:
            detail = self._crashed_error(crashes)
            entry = _lifecycle(
                "rolling_back",
                now,
                output=core.codec.encode({"then": FAILED, "detail": detail}),
            )
            if not core.store.append(wid, entry, owner=owner):
                return None  # another process took the run meanwhile
            log.warning(
                "run %s: crashed its worker %d times; rolling it back before failing it",
                wid,
                crashes,
            )
            return self._invocation(wf, row, recovering=True, owner=owner)
        self._finish_poisoned(wid, FAILED, self._crashed_error(crashes), owner, now)
        log.warning("run %s: failed after crashing its worker %d times", wid, crashes)
        return None

    def _crashed_error(self, crashes: int) -> str:
        return json.dumps(
            {
                "type": "WorkerCrashed",
                "message": f"crashed its worker {crashes} times: each recovery found it where "
                "the last one left it, so it was failed instead of crash-looping the fleet "
                f"(max_recoveries={self.max_recoveries})",
            }
        )

    def _rollback_crashed(
        self, wid: str, undo: Undo, *, state: dict[str, Any], crashes: int, owner: str, now: float
    ) -> None:
        """The compensation ``undo`` crashed its worker ``crashes`` times in a row: charge
        its interrupted attempt and hand the run to an operator, who retries it to continue
        the rollback with a fresh budget."""
        core = self._core
        row = core.store.get_run(wid)
        charged = interruption(undo, row.retrying if row else None, now, final=True)
        if charged is not None and not core.store.append(wid, charged, owner=owner):
            return  # another process took the run meanwhile
        reason = (
            f"the compensation of step {undo.name!r} (seq {undo.seq}) crashed its worker "
            f"{crashes} times in a row, so the rollback stopped instead of crash-looping the "
            f"fleet (max_recoveries={self.max_recoveries}); fix the cause, then retry the run "
            "to continue the rollback"
        )
        error = json.dumps(
            {
                "type": "CompensationFailed",
                "message": reason,
                "reason": reason,
                "seq": undo.seq,
                "then": state.get("then", FAILED),
            }
        )
        self._finish_poisoned(wid, NEEDS_ATTENTION, error, owner, now)
        log.warning("run %s: %s", wid, reason)

    def _finish_poisoned(self, wid: str, status: str, error: str, owner: str, now: float) -> None:
        entry = Entry(
            kind="run",
            name="finished" if status != NEEDS_ATTENTION else NEEDS_ATTENTION,
            status=FAILED,
            started_at=now,
            finished_at=now,
            error=error,
        )
        self._core.store.finish_run(
            wid, owner=owner, status=status, output=None, error=error, now=now, entry=entry
        )

    # -- observing ------------------------------------------------------------------------

    def _row(self, workflow_id: str) -> RunRow:
        row = self._core.store.get_run(workflow_id)
        if row is None:
            raise WorkflowNotFound(f"no run with workflow_id {workflow_id!r} in {self.url}")
        return row

    def _outcome(self, row: RunRow) -> Any:
        if row.status == COMPLETED:
            try:
                value = (
                    self._core.codec.decode(self._core.store.load_payload(row.output))
                    if row.output
                    else None
                )
            except (ValueError, CorruptRecord) as exc:
                raise CorruptRecord(
                    f"run {row.workflow_id!r}: its recorded result cannot be decoded ({exc})",
                    workflow_id=row.workflow_id,
                ) from exc
            wf = self._core.registry.workflows.get(row.name)
            return wf.restore(value) if wf is not None and wf.restore else value
        error = _run_error(row)
        if row.status == FAILED:
            raise WorkflowFailed(
                row.workflow_id, error.get("type", "Error"), error.get("message", "")
            )
        if row.status == CANCELLED:
            raise WorkflowCancelled(f"run {row.workflow_id!r} was cancelled")
        if row.status == NEEDS_ATTENTION:
            reason = error.get("reason") or error.get("message", "")
            if error.get("type") == "CorruptRecord":
                raise CorruptRecord(reason, workflow_id=row.workflow_id, seq=error.get("seq"))
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
                    values.append(self._core.codec.decode(stored) if stored is not None else None)
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
                    idempotency_key=_journal_key(workflow_id, row.kind, row.status, row.position),
                )
            )
        return entries

    # -- serving and operator calls -------------------------------------------------------

    def serve(self, concurrency: int | None = None, queues: list[str] | None = None) -> None:
        """Run a worker in this process until SIGINT/SIGTERM: it claims runs of this app's
        workflows from ``queues`` (default: ``default``, every queue declared with
        :meth:`queue` and every queue a workflow names), at most ``concurrency`` at once.

        Shutdown is graceful: it stops claiming, lets running steps finish (within
        ``lease_seconds``), gives runs back at their next step boundary and releases the rest.
        """
        from ._worker import Worker

        Worker(self, concurrency=concurrency, queues=queues).serve()

    def send_event(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        dedup_key: str | None = None,
        by: str | None = None,
    ) -> None:
        """Send event ``name`` to a run; it waits in the run's inbox until consumed.

        A second event with the same ``dedup_key`` for the run is ignored (webhooks arrive at
        least once). Raises :class:`WorkflowNotFound` for an unknown run.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"event name {name!r}: pass a non-empty str")
        try:
            data = self._core.codec.encode(payload)
        except UnsupportedValue as exc:
            raise SerializationError(
                f"event {name!r} for run {workflow_id!r}: cannot serialize a payload value of "
                f"type {exc.type_name} at {exc.path.replace('value', 'payload', 1)}"
            ) from None
        who = _who(by)
        now = self._core.clock.time()
        entry = self._operator("send-event", now, who, {"name": name, "dedup_key": dedup_key})
        try:
            delivered = self._core.store.deliver_event(
                workflow_id, name=name, payload=data, dedup_key=dedup_key, now=now, entry=entry
            )
        except KeyError:
            raise WorkflowNotFound(
                f"no run with workflow_id {workflow_id!r} in {self.url}"
            ) from None
        self._core.wakeup.set()
        log.info(
            "run %s: event %r %s by %s",
            workflow_id,
            name,
            "delivered" if delivered else "ignored (repeated dedup_key)",
            who,
        )

    def _operator(self, action: str, now: float, by: str, detail: Any) -> Entry:
        """The journal entry of an operator action: what, by whom, when."""
        return Entry(
            kind="operator",
            name=action,
            status=COMPLETED,
            started_at=now,
            finished_at=now,
            input=None if detail is None else self._core.codec.encode(detail),
            by=by,
        )

    def approvals(self, pending: bool = True) -> list[ApprovalRequest]:
        """Approval requests, oldest first; only undecided ones unless ``pending=False``."""
        return [self._approval(row) for row in self._core.store.list_approvals(pending=pending)]

    def _approval(self, row: ApprovalRow) -> ApprovalRequest:
        decision = None
        if row.decided_at is not None and row.approved is not None:
            decision = Approval(
                approved=bool(row.approved),
                by=row.by or "",
                reason=row.reason,
                decided_at=from_epoch(row.decided_at),  # type: ignore[arg-type]
            )
        try:
            details = self._core.codec.decode(row.details) if row.details is not None else None
        except ValueError as exc:
            raise CorruptRecord(
                f"run {row.workflow_id!r}: approval {row.approval_id} has undecodable details "
                f"({exc}); restore the row from a backup",
                workflow_id=row.workflow_id,
            ) from exc
        return ApprovalRequest(
            workflow_id=row.workflow_id,
            approval_id=row.approval_id,
            subject=row.subject,
            details=details,
            requested_at=from_epoch(row.requested_at),  # type: ignore[arg-type]
            expires_at=from_epoch(row.expires_at),
            decision=decision,
        )

    def approve(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        """Approve the run's pending request (or the one named ``approval_id``)."""
        self._decide(workflow_id, approved=True, by=by, reason=reason, approval_id=approval_id)

    def reject(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        """Reject the run's pending request (or the one named ``approval_id``)."""
        self._decide(workflow_id, approved=False, by=by, reason=reason, approval_id=approval_id)

    def _decide(
        self,
        workflow_id: str,
        *,
        approved: bool,
        by: str | None,
        reason: str | None,
        approval_id: str | None,
    ) -> None:
        self._row(workflow_id)
        store = self._core.store
        if approval_id is None:
            pending = store.list_approvals(pending=True, workflow_id=workflow_id)
            if not pending:
                raise InvalidOperation(f"run {workflow_id!r} has no pending approval request")
            if len(pending) != 1:
                raise InvalidOperation(
                    f"run {workflow_id!r} has {len(pending)} pending approval requests; pass "
                    "approval_id= to say which (see app.approvals())"
                )
            approval_id = pending[0].approval_id
        who = _who(by)
        now = self._core.clock.time()
        verb = "approve" if approved else "reject"
        entry = self._operator(verb, now, who, {"approval_id": approval_id, "reason": reason})
        if not store.decide_approval(
            workflow_id,
            approval_id,
            approved=approved,
            by=who,
            reason=reason,
            now=now,
            entry=entry,
        ):
            existing = store.get_approval(workflow_id, approval_id)
            if existing is None:
                raise InvalidOperation(
                    f"run {workflow_id!r} has no approval request {approval_id!r}"
                )
            raise InvalidOperation(
                f"approval {approval_id!r} of run {workflow_id!r} was already decided or expired"
            )
        self._core.wakeup.set()
        log.info("run %s: approval %s %sd by %s", workflow_id, approval_id, verb, who)

    def cancel(self, workflow_id: str, by: str | None = None) -> None:
        """Cancel a run: at once if it is waiting or not started, else at its next step
        boundary. Its status becomes ``cancelled``."""
        self._row(workflow_id)
        who = _who(by)
        now = self._core.clock.time()
        error = json.dumps(
            {"type": "WorkflowCancelled", "message": f"run {workflow_id!r} was cancelled by {who}"}
        )
        verdict = self._core.store.cancel_run(
            workflow_id, now=now, error=error, entry=self._operator("cancel", now, who, None)
        )
        if verdict == "finished":
            status = self._row(workflow_id).status
            raise InvalidOperation(f"run {workflow_id!r} is {status}; there is nothing to cancel")
        held = self._core.keeper.held.get(workflow_id)
        if held is not None:
            held.cancel_requested.set()
        log.info("run %s: cancel by %s: %s", workflow_id, who, verdict)

    def retry(self, workflow_id: str, by: str | None = None) -> None:
        """Dead-letter redrive: a ``failed`` run resumes from its failed step with a fresh
        attempt budget; a ``needs_attention`` run (a divergence after a fix was deployed, an
        exhausted compensation, a repaired record) replays again. An in-doubt irreversible
        step is settled with :meth:`resolve` instead."""
        row = self._row(workflow_id)
        if row.status not in (FAILED, NEEDS_ATTENTION):
            raise InvalidOperation(
                f"run {workflow_id!r} is {row.status}; only failed and needs_attention runs "
                "can be retried"
            )
        error = _run_error(row)
        if error.get("type") == "InDoubt":
            raise InvalidOperation(
                f"run {workflow_id!r} waits on an in-doubt irreversible step (seq "
                f"{error.get('seq')}); settle it with resolve(), not retry()"
            )
        now = self._core.clock.time()
        who = _who(by)
        rollback = self._core.store.rollback_in_progress(workflow_id)
        if error.get("type") == "CompensationFailed" and rollback is not None:
            # Continue the rollback, not the run: its compensation gets a fresh budget and
            # the next invocation goes straight back to the compensations still to do.
            entries = [
                Entry(
                    kind="compensation",
                    name="reset",
                    status=FAILED,
                    seq=error.get("seq"),
                    attempt=0,
                    started_at=now,
                    finished_at=now,
                    error=json.dumps(
                        {"type": "Redriven", "message": f"retried by {who}", "final": False}
                    ),
                ),
                self._operator("retry", now, who, {"from_status": row.status}),
                _lifecycle("rolling_back", now, output=rollback),
            ]
        else:
            entries = [
                Entry(
                    kind="step",
                    name=rec.name,
                    status=FAILED,
                    seq=rec.seq,
                    position=rec.position,
                    attempt=0,
                    started_at=now,
                    finished_at=now,
                    error=json.dumps(
                        {
                            "type": "Redriven",
                            "message": f"retried by {who}",
                            "final": False,
                            "retry_at": None,
                        }
                    ),
                )
                for rec in _failed_for_good(
                    self._core.store.replay_index(workflow_id),
                    interrupted=error.get("type") == "WorkerCrashed",
                )
            ]
            entries.append(self._operator("retry", now, who, {"from_status": row.status}))
        if not self._core.store.redrive(workflow_id, now=now, entries=entries):
            raise InvalidOperation(
                f"run {workflow_id!r} changed while it was being retried; look again"
            )
        self._core.wakeup.set()
        log.info("run %s: retried by %s", workflow_id, who)

    def resolve(
        self,
        workflow_id: str,
        seq: int,
        result: Any = _MISSING,
        rerun: bool = False,
        by: str | None = None,
    ) -> None:
        """Settle an in-doubt irreversible step: record ``result`` (which may be ``None``) as
        what happened, or ``rerun=True`` to run it again. The run leaves ``needs_attention``."""
        if (result is _MISSING) == (not rerun):
            raise ValueError("resolve() takes exactly one of result=... or rerun=True")
        row = self._row(workflow_id)
        error = _run_error(row)
        if row.status != NEEDS_ATTENTION or error.get("type") != "InDoubt":
            raise InvalidOperation(f"run {workflow_id!r} has no in-doubt step to resolve")
        if error.get("seq") != seq:
            raise InvalidOperation(
                f"run {workflow_id!r} is in doubt about seq {error.get('seq')}, not {seq}"
            )
        rec = next(r for r in reversed(self._core.store.replay_index(workflow_id)) if r.seq == seq)
        now = self._core.clock.time()
        who = _who(by)
        if rerun:
            entry = Entry(
                kind="step",
                name=rec.name,
                status=FAILED,
                seq=seq,
                position=rec.position,
                attempt=rec.attempt,
                started_at=now,
                finished_at=now,
                error=json.dumps(
                    {
                        "type": "ResolvedRerun",
                        "message": f"rerun by {who}",
                        "final": False,
                        "retry_at": None,
                        "rerun": True,
                    }
                ),
            )
        else:
            try:
                payload = self._core.codec.encode(result)
            except UnsupportedValue as exc:
                raise SerializationError(
                    f"resolve({workflow_id!r}, {seq}): cannot serialize a result value of type "
                    f"{exc.type_name}"
                ) from None
            entry = Entry(
                kind="step",
                name=rec.name,
                status=COMPLETED,
                seq=seq,
                position=rec.position,
                attempt=rec.attempt,
                started_at=now,
                finished_at=now,
                output=payload,
                by=who,
            )
        detail = {"seq": seq, "rerun": True} if rerun else {"seq": seq, "result": result}
        entries = [entry, self._operator("resolve", now, who, detail)]
        if not self._core.store.redrive(workflow_id, now=now, entries=entries):
            raise InvalidOperation(f"run {workflow_id!r} changed while it was being resolved")
        self._core.wakeup.set()
        log.info("run %s: seq %d resolved by %s", workflow_id, seq, who)

    def fork(
        self,
        workflow_id: str,
        from_seq: int,
        new_id: str | None = None,
        allow_reexecute: bool = False,
        by: str | None = None,
    ) -> Handle:
        """A new run that reuses this run's journal before ``from_seq`` and executes from there.

        Refused with :class:`UnsafeFork` when a completed irreversible step at or after
        ``from_seq`` would run again, or when an irreversible step anywhere in the journal is
        in doubt, unless ``allow_reexecute=True``. A ``from_seq`` past the end of the journal
        plus one raises :class:`InvalidOperation`.
        """
        row = self._row(workflow_id)
        if not isinstance(from_seq, int) or isinstance(from_seq, bool) or from_seq < 1:
            raise InvalidOperation(f"from_seq={from_seq!r}: pass a journal seq (an int >= 1)")
        rows = self._core.store.fork_candidates(workflow_id)
        end = max((r.seq for r in rows), default=0)
        if from_seq > end + 1:
            raise InvalidOperation(
                f"from_seq={from_seq}: run {workflow_id!r} has journal seqs 1 to {end}; fork "
                f"from one of them, or from {end + 1} to reuse the whole journal"
            )
        reuse, rerun_irreversible, in_doubt = _fork_plan(rows, from_seq)
        if in_doubt and not allow_reexecute:
            names = ", ".join(f"{name!r} (seq {seq})" for seq, name in in_doubt)
            raise UnsafeFork(
                f"run {workflow_id!r} has the irreversible step(s) {names} in doubt: an "
                "interrupted attempt may have taken effect, and a fork would run it again "
                f"under a new idempotency key; settle it with app.resolve({workflow_id!r}, "
                f"{in_doubt[0][0]}, result=...) first, or pass allow_reexecute=True if running "
                "it again is what you want"
            )
        if rerun_irreversible and not allow_reexecute:
            names = ", ".join(f"{name!r} (seq {seq})" for seq, name in rerun_irreversible)
            raise UnsafeFork(
                f"forking run {workflow_id!r} from seq {from_seq} would run the completed "
                f"irreversible step(s) {names} again; fork from after them, or pass "
                "allow_reexecute=True if running them again is what you want"
            )
        fork_id = _new_id(new_id, label="new_id")
        now = self._core.clock.time()
        who = _who(by)
        origin = {"forked_from": workflow_id, "from_seq": from_seq}
        started = _lifecycle(
            "started", now, input=row.input, output=self._core.codec.encode(origin)
        )
        started.by = who
        note = self._operator("fork", now, who, {"new_id": fork_id, "from_seq": from_seq})
        if not self._core.store.fork_run(
            workflow_id,
            new_id=fork_id,
            name=row.name,
            queue=row.queue,
            input=row.input,
            now=now,
            reuse=reuse,
            started=started,
            by=who,
            notes=note,
        ):
            raise WorkflowAlreadyExists(
                f"a run with workflow_id {fork_id!r} already exists; pick another new_id"
            )
        self._core.wakeup.set()
        log.info("run %s: forked from %s at seq %d by %s", fork_id, workflow_id, from_seq, who)
        return Handle(self, fork_id)
