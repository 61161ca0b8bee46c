"""Engine calls written once for sync and async workflows, as flows: a generator that yields
each blocking store call it needs (a call without arguments), is sent what that call returned,
and returns the call's value. A sync workflow's driver makes the calls in its own thread; an
async workflow's awaits them made by a thread of the engine's, so that the event loop the
app's async runs share goes on while one of them waits for the database (``waits.py``,
``children.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from .invocation import Invocation

__all__ = ["Flow", "drive", "drive_async"]

T = TypeVar("T")
Flow = Generator[Callable[[], Any], Any, T]


def drive(flow: Flow[T]) -> T:
    """Run ``flow``, making its store calls in this thread."""
    try:
        call = next(flow)
        while True:
            call = flow.send(call())
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def drive_async(inv: Invocation, flow: Flow[T]) -> T:
    """Run ``flow`` on the run's event loop, awaiting each store call made off it. A
    cancellation that came during a call takes effect once the flow has taken in what the
    call decided (its lease check, its bookkeeping): this raises ``CancelledError`` before
    the flow's next call or its end, and in place of an error the flow raised then (a
    child's failure, say); only an engine signal (a lost lease) goes first."""
    if inv.defers():  # the values its code recorded since its last boundary, first
        await inv.flush_async()
    cancelled = False
    try:
        call = next(flow)
        while True:
            try:
                decided, interrupted = await inv.made_off_loop(call)
            except BaseException as exc:  # raised where the flow made the call
                call = flow.throw(exc)
                continue
            cancelled = interrupted
            try:
                call = flow.send(decided)
            except StopIteration:
                raise
            except Exception as exc:  # the call's own failure: the cancellation comes first
                if cancelled:
                    raise asyncio.CancelledError from exc
                raise
            if cancelled:
                flow.close()
                raise asyncio.CancelledError
    except StopIteration as done:
        if cancelled:
            raise asyncio.CancelledError from None
        return done.value  # type: ignore[no-any-return]
