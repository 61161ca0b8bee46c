"""The attempt loop of steps and compensations, written once: :func:`_attempts` decides,
and two thin drivers carry out what it asks, :func:`run_attempts` in a thread and
:func:`run_attempts_async` on the run's event loop. It asks for one of two things: run an
attempt (it yields the attempt's :class:`StepScope`, and receives its outcome) or wait before
the next one (it yields the seconds). A backoff longer than ``DURABLE_BACKOFF_SECONDS`` unwinds
the run as a durable timer instead of holding a thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from .._clock import SystemClock
from .._errors import StepTimeout
from .._loop import run_on
from .._signals import EngineSignal, LoopClosed
from .attempt import DONE, AsyncAttempted, Attempted
from .invocation import CURRENT_STEP, StepScope
from .loop_gone import cancelled_by_closing
from .observe import attempt_began

__all__ = ["DURABLE_BACKOFF_SECONDS", "run_attempts", "run_attempts_async"]

# A backoff longer than this unwinds the run as a durable timer instead of holding a thread.
DURABLE_BACKOFF_SECONDS = 5.0

Outcome = tuple[Any, Exception | None]


def _attempts(call: Attempted) -> Generator[StepScope | float, Outcome | None, Any]:
    """The loop: yields an attempt to run (its scope; sent back its outcome) or seconds to
    wait; returns the call's value. A failure for good raises from ``call.settle``."""
    if call.retry_at:
        yield max(0.0, call.retry_at - call.inv.runtime.clock.time())
    while True:
        call.check_alive()
        if call.pre_attempt():
            return call.value
        call.admit()
        scope = call.scope()
        call.begin_attempt()
        reply = yield scope
        assert reply is not None
        verdict = call.settle(*reply)
        if verdict is DONE:
            return call.value
        assert isinstance(verdict, float)
        yield verdict


def run_attempts(call: Attempted) -> Any:
    """Drive the attempts of ``call`` in this thread; its value."""
    loop = _attempts(call)
    reply: Outcome | None = None
    while True:
        try:
            action = loop.send(reply)
        except StopIteration as done:
            return done.value
        if isinstance(action, float):
            reply = None
            pause = _pause(call, action)
            if pause > 0:
                call.inv.runtime.clock.sleep(pause)
        else:
            reply = _attempt(call, action)


async def run_attempts_async(call: AsyncAttempted) -> Any:
    """Drive the attempts of ``call`` on the run's event loop; its value. What a decision
    journals (a failed attempt, a retry's marker) is awaited before the driver goes on, and
    before what it raised (a failure for good) leaves."""
    loop = _attempts(call)
    reply: Outcome | None = None
    try:
        while True:
            try:
                action = loop.send(reply)
            except StopIteration as done:
                return done.value
            if call.writes:  # (most decisions write nothing: no coroutine for them)
                await call.journal_async()
            if isinstance(action, float):
                reply = None
                await _sleep_async(call, _pause(call, action))
            else:
                reply = await _attempt_async(call, action)
    finally:
        if call.writes:
            await call.journal_async()


def _pause(call: Attempted, seconds: float) -> float:
    """Seconds to wait in place before the next attempt; a longer backoff unwinds the run
    as a durable timer instead of holding a thread."""
    if seconds > DURABLE_BACKOFF_SECONDS and call.durable_backoff():
        raise call.inv.suspend(wake_at=call.retry_at, waiting_for=None)
    return seconds


async def _sleep_async(call: Attempted, pause: float) -> None:
    if pause <= 0:
        return
    clock = call.inv.runtime.clock
    if isinstance(clock, SystemClock):  # on the loop: a waiting run holds no thread
        await asyncio.sleep(pause)
    else:  # a test's clock sleeps its own way
        await asyncio.to_thread(clock.sleep, pause)


def _attempt(call: Attempted, scope: StepScope) -> Outcome:
    """Run one attempt in this thread: its result, or the exception it raised."""
    fn, args, kwargs = call.target()
    try:
        hooks = scope.invocation.observe
        if hooks is not None:
            with attempt_began(hooks, scope):
                return _call(call, fn, scope, args, kwargs), None
        return _call(call, fn, scope, args, kwargs), None
    except EngineSignal:
        raise
    except Exception as exc:
        call.stopped(scope, exc)
        return None, exc


async def _attempt_async(call: Attempted, scope: StepScope) -> Outcome:
    """Run one attempt on the run's event loop: its result, or the exception it raised."""
    fn, args, kwargs = call.target()
    try:
        hooks = scope.invocation.observe
        if hooks is not None:
            with attempt_began(hooks, scope):
                return await _call_async(call, fn(*args, **kwargs), scope), None
        return await _call_async(call, fn(*args, **kwargs), scope), None
    except EngineSignal:
        raise
    except Exception as exc:
        call.stopped(scope, exc)
        return None, exc


def _call(
    call: Attempted,
    fn: Callable[..., Any],
    scope: StepScope,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call ``fn`` within the step's timeout (a sync function in a thread it may abandon;
    what returns an awaitable, such as an ``async def`` compensation, on the run's loop)."""
    token = CURRENT_STEP.set(scope)
    try:
        timeout = call.step.timeout
        if timeout is None:
            value = fn(*args, **kwargs)
        else:
            value = _within(call, scope, timeout, lambda: fn(*args, **kwargs))
        if value is not None and inspect.isawaitable(value):
            try:
                return run_on(call.inv.event_loop, _call_async(call, value, scope))
            except LoopClosed as signal:
                if inspect.iscoroutine(value):
                    value.close()  # never started: no "never awaited" warning for it
                raise call.inv.lost_loop(str(signal)) from None
            except concurrent.futures.CancelledError:
                if cancelled_by_closing(call.inv):
                    raise call.inv.lost_loop(
                        "its event loop cancelled a call as it closed"
                    ) from None
                raise
        return value
    finally:
        CURRENT_STEP.reset(token)


def _within(call: Attempted, scope: StepScope, timeout: float, run: Callable[[], Any]) -> Any:
    """``run()`` in a thread of its own, abandoned after ``timeout`` seconds."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = run()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(
        target=contextvars.copy_context().run,
        args=(target,),
        daemon=True,
        name=f"stalwart-step-{call.step.name}",
    )
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise StepTimeout(
            f"{call.label} attempt {scope.attempt} ran longer than its timeout of "
            f"{timeout}s; it was abandoned and its late result will be discarded"
        )
    if "error" in box:
        raise box["error"]
    return box.get("value")


async def _call_async(call: Attempted, coro: Awaitable[Any], scope: StepScope) -> Any:
    token = CURRENT_STEP.set(scope)
    try:
        timeout = call.step.timeout
        if timeout is None:
            return await coro
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await coro
        except TimeoutError:
            if not deadline.expired():
                raise
            raise StepTimeout(
                f"{call.label} attempt {scope.attempt} ran longer than its timeout of "
                f"{timeout}s and was cancelled"
            ) from None
    finally:
        CURRENT_STEP.reset(token)
