"""The app: a store, a registry of workflows and steps, and the client and operator calls."""

from __future__ import annotations

import datetime as _dt
import logging
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, overload

from ._checks import Checks
from ._clock import Clock, ServerClock, SystemClock
from ._declare import (
    check_app_options,
    check_start_options,
    check_sync_run,
    declare_queue,
    declare_step,
    declare_workflow,
    definition_of,
    encode_args,
)
from ._engine.driver import Driver
from ._engine.loop import prepare_app_loop
from ._engine.streams import close_streams
from ._handle import Handle
from ._ingress import Delivery, Ingress
from ._ingress.webhooks import Webhooks
from ._keyring import Keyring
from ._loop import AppLoop
from ._model import (
    Breaker,
    Budget,
    run_id,
)
from ._operator import Operator
from ._prune import Pruning, retention_of
from ._reads import Reads
from ._registry import Registry
from ._rekey import Rekeying
from ._retry import Retry
from ._runtime import Runtime
from ._schedules import Schedules
from ._serde import make_codec
from ._shared import SharedContext
from ._snapshots import Snapshots
from ._steering import Steering
from ._store import Store, open_store, resolve_url, stamp_with, store_name
from ._store.keys import attach_keyring
from ._streams import StreamReads
from ._tracing import Tracing
from ._views import Views
from ._worker import serve

__all__ = ["Handle", "Stalwart"]

log = logging.getLogger("stalwart")
F = TypeVar("F", bound=Callable[..., Any])

# How long close() waits for the app.run calls of other threads to return once it closed the
# app's loop (a run that loop gave back releases its lease first).
CLOSE_WAIT_S = 5.0


def _default_clock(store: Store) -> Clock:
    """One clock per store: this machine's for a store on it (SQLite), where every process
    reads the same clock; a server's (PostgreSQL), read through ``ServerClock``."""
    offset = store.clock_offset()
    if offset == 0.0:  # the store says it is on this machine
        return SystemClock()
    return ServerClock(store.clock_offset, first=offset)


class Stalwart(
    Reads,
    StreamReads,
    SharedContext,
    Snapshots,
    Schedules,
    Checks,
    Pruning,
    Rekeying,
    Webhooks,
    Steering,
):
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
        prices: dict[str, tuple[float, float]] | None = None,
        encryption: Keyring | None = None,
        retention: float | _dt.timedelta | None = None,
    ) -> None:
        check_app_options(lease_seconds, max_recoveries, prices)
        kept = retention_of(retention, "Stalwart")
        keyring = encryption if encryption is not None else Keyring.from_env()
        codec = make_codec(serializer, keyring)
        self.url = resolve_url(url)
        store = open_store(self.url, durability=durability)
        if keyring is not None:
            attach_keyring(store, keyring)
        self._runtime = Runtime(
            url=self.url,
            name=store_name(self.url),
            store=store,
            codec=codec,
            clock=clock or _default_clock(store),
            lease_seconds=float(lease_seconds),
            max_recoveries=max_recoveries,
            registry=Registry(),
            loop=AppLoop(prepare_app_loop),
            prices=dict(prices or {}),
            observers=[Tracing()],
            retention=kept,
        )
        stamp_with(store, self._runtime.clock.time)

        self._runtime.app = weakref.ref(self)
        self._driver = Driver(self._runtime)
        self._views = Views(self._runtime)
        self._operator = Operator(self._runtime, self._driver.keeper, self._views)
        self._ingress = Ingress(Delivery(self._driver, self._operator))

    def _handle(self, workflow_id: str) -> Handle:
        return Handle(workflow_id, views=self._views, cancel=self.cancel)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop background renewals and release the store's connections."""
        self._driver.close()
        self._runtime.loop.close()
        # a run the loop's closing gave back releases its lease from its own thread
        self._driver.calls.wait(CLOSE_WAIT_S)
        close_streams(self._runtime.store)
        self._runtime.store.close()

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
        breaker: Breaker | None = None,
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
        breaker: Breaker | None = None,
    ) -> Any:
        """Declare a step: journaled when called inside a workflow, retried by ``retry``."""
        return declare_step(
            self._runtime,
            fn,
            retry=retry,
            timeout=timeout,
            irreversible=irreversible,
            verify=verify,
            compensate=compensate,
            output=output,
            name=name,
            breaker=breaker,
        )

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
        budget: Budget | None = None,
        retention: float | _dt.timedelta | None = None,
    ) -> Callable[[F], F]: ...

    def workflow(
        self,
        fn: Any = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        timeout: float | None = None,
        budget: Budget | None = None,
        retention: float | _dt.timedelta | None = None,
    ) -> Any:
        """Declare a workflow: durable, replayed from its journal after any interruption;
        ``budget`` caps what each run may spend; ended runs are kept for ``retention`` (seconds
        or a ``timedelta``; ``None``: the app's)."""
        kept = retention_of(retention, "@app.workflow")
        return declare_workflow(
            self._runtime,
            fn,
            name=name,
            queue=queue,
            timeout=timeout,
            budget=budget,
            retention=kept,
        )

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
        declare_queue(self._runtime, name, concurrency, rate, period)

    # -- starting and running -------------------------------------------------------------

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
        definition = definition_of(self._runtime, wf)
        check_start_options(queue, priority)
        payload = encode_args(self._runtime, definition, args, kwargs)
        wid = run_id(workflow_id)
        self._driver.start(definition, wid, payload, queue=queue, priority=priority)
        return self._handle(wid)

    def run(self, wf: Any, *args: Any, workflow_id: str | None = None, **kwargs: Any) -> Any:
        """Start (or resume) a run and execute it in this process until it is terminal; while
        it waits (a timer, an event, an approval) it holds no lease and this call blocks."""
        definition = definition_of(self._runtime, wf)
        check_sync_run(definition)
        payload, wid = encode_args(self._runtime, definition, args, kwargs), run_id(workflow_id)
        return self._views.outcome(self._driver.run(definition, wid, payload))

    async def run_async(
        self, wf: Any, *args: Any, workflow_id: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`run` for code inside an event loop; returns and raises as ``run`` does. The
        workflow's async code runs on your loop, so your loop-bound clients work in it. The
        engine's blocking work runs on a thread of its own, not your loop's default executor.
        Cancelling the ``await`` does not stop the run (docs/replay.md)."""
        definition = definition_of(self._runtime, wf)
        payload, wid = encode_args(self._runtime, definition, args, kwargs), run_id(workflow_id)
        return self._views.outcome(await self._driver.run_async(definition, wid, payload))

    # -- observing ------------------------------------------------------------------------

    def handle(self, workflow_id: str) -> Handle:
        """A handle on an existing run; :class:`WorkflowNotFound` if there is none."""
        self._views.row(workflow_id)
        return self._handle(workflow_id)

    # -- serving and operator calls -------------------------------------------------------

    def serve(
        self,
        concurrency: int | None = None,
        queues: list[str] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        """Run a worker, and the app's subscriptions, until SIGINT/SIGTERM (docs/workers.md)."""
        companions = self._ingress.companions()
        serve(self._driver, concurrency, queues, metrics_port, metrics_host, companions=companions)
