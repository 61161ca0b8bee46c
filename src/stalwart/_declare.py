"""Declarations: ``@app.step``, ``@app.workflow`` and ``app.queue`` check what they are
given and register it; the proxies they return are what user code calls."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _inputs
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, Invocation
from ._engine.steps import call_step, call_step_async
from ._errors import RegistrationError, SerializationError, UsageError
from ._model import Breaker, Budget
from ._registry import StepDef, WorkflowDef
from ._retry import Retry
from ._runtime import READ_ONLY_DECLARATIONS, Runtime
from ._serde import UnsupportedValue, argument_path
from ._store.base import QueueLimits

__all__ = [
    "StepFunction",
    "WorkflowFunction",
    "check_app_options",
    "check_queue_name",
    "check_start_options",
    "check_sync_run",
    "declare_queue",
    "declare_step",
    "declare_workflow",
    "definition_of",
    "encode_args",
    "run_step",
    "run_step_async",
]

_SYNC_IRREVERSIBLE_TIMEOUT = (
    "an irreversible step with timeout= must be 'async def': a sync step cannot be stopped, "
    "so its abandoned attempt could still take effect after the next one; drop timeout= or "
    "make the step async"
)


class StepFunction:
    """A declared step: journaled inside a workflow, a plain call anywhere else."""

    def __init__(self, runtime: Runtime, step: StepDef) -> None:
        self.runtime = runtime
        self.definition = step
        functools.update_wrapper(self, step.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        step = self.definition
        inv = CURRENT_RUN.get()
        if inv is None or CURRENT_STEP.get() is not None or inv.runtime is not self.runtime:
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

    def __init__(self, runtime: Runtime, wf: WorkflowDef) -> None:
        self.runtime = runtime
        self.definition = wf
        functools.update_wrapper(self, wf.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.definition.fn(*args, **kwargs)


def check_queue_name(queue: Any) -> None:
    """Refuse what cannot name a queue."""
    if not isinstance(queue, str) or not queue or len(queue) > 200:
        raise UsageError(f"queue={queue!r}: a queue is named by a non-empty string")
    _inputs.name(queue, "queue")


def _declared_name(name: Any, decorator: str) -> None:
    """Refuse a ``name=`` that cannot be recorded as a workflow's or a step's name."""
    if name is None:
        return
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{decorator}(name={name!r}): pass a non-empty str, or None")
    _inputs.name(name, "name", decorator)


def check_app_options(lease_seconds: Any, max_recoveries: Any, prices: Any = None) -> None:
    """Refuse the app's policies when they are not values it can use."""
    for model, price in (prices or {}).items():
        if (
            not isinstance(model, str)
            or not isinstance(price, tuple)
            or len(price) != 2
            or not all(
                isinstance(p, int | float) and not isinstance(p, bool) and math.isfinite(p)
                for p in price
            )
            or min(price) < 0
        ):
            raise UsageError(
                f"prices={{{model!r}: {price!r}}}: give each model a tuple "
                "(usd_per_million_input_tokens, usd_per_million_output_tokens)"
            )
    _inputs.seconds(lease_seconds, "lease_seconds", positive=True)
    if (
        isinstance(max_recoveries, bool)
        or not isinstance(max_recoveries, int)
        or max_recoveries < 1
    ):
        raise UsageError(f"max_recoveries={max_recoveries!r}: pass an int >= 1")


def check_start_options(queue: str | None, priority: Any) -> None:
    """Refuse a queue name or a priority ``app.start`` cannot record."""
    if queue is not None:
        check_queue_name(queue)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority={priority!r}: must be an int (higher runs first)")
    if not -(2**31) <= priority <= 2**31 - 1:
        raise UsageError(
            f"priority={priority}: pass an int in [-2**31, 2**31 - 1] (higher runs first)"
        )


def check_sync_run(wf: WorkflowDef) -> None:
    """Refuse ``app.run`` of an async workflow from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    if wf.is_async:
        raise TypeError(
            f"app.run() of the async workflow {wf.name!r} was called inside a running "
            "event loop; use 'await app.run_async(...)' there"
        )


def declare_step(
    runtime: Runtime,
    fn: Any,
    *,
    retry: Retry | None,
    timeout: float | None,
    irreversible: bool,
    verify: Callable[..., Any] | None,
    compensate: Callable[..., Any] | None,
    output: Callable[[Any], Any] | None,
    name: str | None,
    breaker: Breaker | None = None,
) -> Any:
    """``@app.step``: check the options, register the step, return its proxy (or a decorator)."""
    _declared_name(name, "@app.step")
    options = StepOptions(retry, timeout, irreversible, verify, compensate, output, breaker)
    options.check(fn)

    def decorate(func: Any) -> Any:
        if not callable(func):
            raise TypeError("@app.step decorates a function")
        step = options.step(func, name or func.__qualname__)
        runtime.registry.add_step(step)
        return StepFunction(runtime, step)

    return decorate(fn) if fn is not None else decorate


@dataclass(frozen=True)
class StepOptions:
    """What a step is declared with, checked once; the same for ``@app.step`` and
    ``stalwart.run_step``."""

    retry: Retry | None = None
    timeout: float | None = None
    irreversible: bool = False
    verify: Callable[..., Any] | None = None
    compensate: Callable[..., Any] | None = None
    output: Callable[[Any], Any] | None = None
    breaker: Breaker | None = None

    @property
    def time_limit(self) -> float | None:
        """The timeout in seconds, ``None`` for none (``None``, ``inf``, ``timedelta.max``)."""
        return _inputs.limit(self.timeout, "timeout", positive=True)

    def check(self, fn: Any = None) -> None:
        """Refuse options that cannot work together (``fn``: the step's function, if known)."""
        irreversible, timeout, verify = self.irreversible, self.time_limit, self.verify
        if fn is not None and irreversible and timeout is not None:
            self.step(fn, "")  # refuses a sync irreversible step with a timeout
        if verify is not None and not irreversible:
            raise UsageError("verify= checks an irreversible step: add irreversible=True")
        if verify is not None and (not callable(verify) or inspect.iscoroutinefunction(verify)):
            raise TypeError("verify= must be a plain function (def) taking the step's arguments")
        if self.compensate is not None and not callable(self.compensate):
            raise TypeError("compensate= must be a function taking (result, *args, **kwargs)")
        if self.retry is not None and not isinstance(self.retry, Retry):
            raise TypeError(f"retry={self.retry!r}: pass a stalwart.Retry(...)")
        if self.output is not None and not callable(self.output):
            raise TypeError(f"output={self.output!r}: pass a pydantic model class or a callable")
        if self.breaker is not None and not isinstance(self.breaker, Breaker):
            raise TypeError(f"breaker={self.breaker!r}: pass a stalwart.Breaker(...)")

    def step(self, func: Callable[..., Any], name: str) -> StepDef:
        """The definition of step ``name`` running ``func`` with these options."""
        is_async = inspect.iscoroutinefunction(func)
        timeout = self.time_limit
        if self.irreversible and timeout is not None and not is_async:
            raise UsageError(_SYNC_IRREVERSIBLE_TIMEOUT)
        policy = self.retry or Retry()
        if self.irreversible and self.verify is None:
            # Never re-executed blindly: without verify there is no second attempt.
            policy = dataclasses.replace(policy, max_attempts=1)
        return StepDef(
            fn=func,
            name=name,
            retry=policy,
            irreversible=bool(self.irreversible),
            verify=self.verify,
            compensate=self.compensate,
            undo_retry=self.retry or Retry(),
            breaker=self.breaker,
            timeout=timeout,
            output=self.output,
            is_async=is_async,
        )


def declare_workflow(
    runtime: Runtime,
    fn: Any,
    *,
    name: str | None,
    queue: str,
    timeout: float | None,
    budget: Budget | None = None,
    retention: float | None = None,
) -> Any:
    """``@app.workflow``: check the options, register the workflow, return its proxy
    (``retention`` checked already: seconds, or ``None`` for the app's)."""
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget={budget!r}: pass a stalwart.Budget(...)")
    _declared_name(name, "@app.workflow")
    time_limit = _inputs.limit(timeout, "timeout", positive=True)
    check_queue_name(queue)

    def decorate(func: Any) -> Any:
        if not callable(func):
            raise TypeError("@app.workflow decorates a function")
        wf = WorkflowDef(
            fn=func,
            name=name or func.__qualname__,
            queue=queue,
            is_async=inspect.iscoroutinefunction(func),
            timeout=time_limit,
            budget=budget,
            retention=retention,
        )
        runtime.registry.add_workflow(wf)
        return WorkflowFunction(runtime, wf)

    return decorate(fn) if fn is not None else decorate


def declare_queue(
    runtime: Runtime, name: str, concurrency: int | None, rate: int | None, period: float
) -> None:
    """``app.queue``: check and record a queue's limits."""
    check_queue_name(name)
    for label, value in (("concurrency", concurrency), ("rate", rate)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"app.queue({name!r}): {label}={value!r} must be an int or None")
        if value is not None and value < 1:
            raise UsageError(f"app.queue({name!r}): {label}={value!r} must be >= 1 or None")
    seconds = _inputs.seconds(period, f"{name!r}, period", "app.queue", positive=True)
    runtime.queues[name] = QueueLimits(concurrency, rate, seconds)
    if READ_ONLY_DECLARATIONS.get():
        return
    runtime.store.declare_queue(  # for operators: what every worker of the app applies
        name, concurrency=concurrency, rate=rate, period=seconds, now=runtime.clock.time()
    )


def definition_of(runtime: Runtime, wf: Any) -> WorkflowDef:
    """The definition behind a workflow proxy or name (of this app only)."""
    if isinstance(wf, WorkflowFunction):
        if wf.runtime is not runtime:
            raise TypeError(f"workflow {wf.definition.name!r} is declared on another app")
        return wf.definition
    if isinstance(wf, str):
        return runtime.registry.workflow(wf)
    raise TypeError(
        f"{wf!r} is not a workflow of this app: decorate it with @app.workflow or pass its name"
    )


def encode_args(
    runtime: Runtime, wf: WorkflowDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bytes:
    """A run's arguments as stored; ``SerializationError`` when a value cannot be."""
    wf.check_arguments(args, kwargs)
    try:
        return runtime.codec.encode({"args": list(args), "kwargs": kwargs})
    except UnsupportedValue as exc:
        raise SerializationError(
            f"workflow {wf.name!r}: cannot serialize an argument of type {exc.type_name} at "
            f"{argument_path(exc.path)}; pass JSON-compatible values "
            "(or opt in with serializer='pickle')"
        ) from None


def run_step(
    name: str,
    fn: Callable[..., Any],
    *,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    retry: Retry | None = None,
    timeout: float | None = None,
    irreversible: bool = False,
    verify: Callable[..., Any] | None = None,
    compensate: Callable[..., Any] | None = None,
    output: Callable[[Any], Any] | None = None,
    breaker: Breaker | None = None,
) -> Any:
    """Journal one call ``fn(*args, **kwargs)`` as a step named ``name``, with exactly the
    semantics of a declared step: replay returns the recorded result (or raises the recorded
    failure), and ``retry``, ``timeout``, ``irreversible``/``verify``, ``compensate``,
    ``output`` and ``breaker`` mean what they mean on ``@app.step``. ``name`` is what the
    journal records and what replay compares. Outside a workflow (or inside a step) it just
    calls ``fn``.

    For an async ``fn``, ``await`` :func:`run_step_async` instead."""
    call_args, call_kwargs = _call_of(name, fn, args, kwargs)
    options = StepOptions(retry, timeout, irreversible, verify, compensate, output, breaker)
    journaled = _in_run(name, fn, options)
    if journaled is None:
        return fn(*call_args, **call_kwargs)
    inv, step = journaled
    if step.is_async:
        raise TypeError(
            f"run_step({name!r}, ...) of an async function: use "
            "'await stalwart.run_step_async(...)' in an async workflow"
        )
    step.check_arguments(call_args, call_kwargs)
    return call_step(inv, step, call_args, call_kwargs)


async def run_step_async(
    name: str,
    fn: Callable[..., Any],
    *,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    retry: Retry | None = None,
    timeout: float | None = None,
    irreversible: bool = False,
    verify: Callable[..., Any] | None = None,
    compensate: Callable[..., Any] | None = None,
    output: Callable[[Any], Any] | None = None,
    breaker: Breaker | None = None,
) -> Any:
    """:func:`run_step` for an async ``fn``, awaited in an async workflow."""
    call_args, call_kwargs = _call_of(name, fn, args, kwargs)
    options = StepOptions(retry, timeout, irreversible, verify, compensate, output, breaker)
    journaled = _in_run(name, fn, options)
    if journaled is None:
        return await fn(*call_args, **call_kwargs)
    inv, step = journaled
    if not step.is_async:
        raise TypeError(
            f"run_step_async({name!r}, ...) of a plain function: call stalwart.run_step(...)"
        )
    if not inv.is_async:
        raise TypeError(
            f"run_step_async({name!r}, ...) in the sync workflow {inv.wf.name!r}: make the "
            "workflow 'async def' or the function a plain 'def' run with stalwart.run_step"
        )
    step.check_arguments(call_args, call_kwargs)
    return await call_step_async(inv, step, call_args, call_kwargs)


def _call_of(name: Any, fn: Any, args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"run_step(name={name!r}): name the step with a non-empty str")
    _inputs.name(name, "name", "run_step")
    if not callable(fn):
        raise TypeError(f"run_step({name!r}, {fn!r}): pass the callable to run")
    if not isinstance(args, tuple | list):
        raise TypeError(f"run_step({name!r}, args={args!r}): pass a tuple of arguments")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"run_step({name!r}, kwargs={kwargs!r}): pass a dict or None")
    return tuple(args), dict(kwargs or {})


def _in_run(
    name: str, fn: Callable[..., Any], options: StepOptions
) -> tuple[Invocation, StepDef] | None:
    """The run a ``run_step`` call journals into, and its step; ``None`` outside a workflow
    (or inside a step), where the call is a plain call."""
    inv = CURRENT_RUN.get()
    if inv is None or CURRENT_STEP.get() is not None:
        options.check(fn)  # refused as it would be in a workflow
        return None
    return inv, _unnamed_step(inv.runtime, name, fn, options)


def _unnamed_step(
    runtime: Runtime, name: str, fn: Callable[..., Any], options: StepOptions
) -> StepDef:
    """The definition of an undecorated step, built once per name, function and options
    (so a compensation finds it by name, as it finds a declared step)."""
    declared = runtime.registry.steps.get(name)
    if declared is not None:
        raise RegistrationError(
            f"run_step({name!r}, ...): a step named {name!r} is declared with @app.step; call "
            "that step, or give this one another name"
        )
    known = runtime.registry.unnamed.get(name)
    if known is not None and known[0] is fn and known[1] == options:
        return known[2]
    if known is not None and known[1].compensate is not options.compensate:
        # A compensation is found by the step's name: one name, one undo.
        raise RegistrationError(
            f"run_step({name!r}, ...) was given another compensate= than before under the "
            "same name; give each undoable step a name of its own"
        )
    options.check(fn)
    step = options.step(fn, name)
    runtime.registry.add_breaker(options.breaker)
    runtime.registry.unnamed[name] = (fn, options, step)
    return step
