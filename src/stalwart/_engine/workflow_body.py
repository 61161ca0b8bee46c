"""How the workflow's own code runs for one invocation: a sync workflow in the invocation's
thread, an async one as the run's main task on its event loop (from a thread that waits for
it, ``run_async``; or as the current task, ``main_task``). What the code returned or raised is
the executor's to record (``executor.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from dataclasses import dataclass
from typing import Any

from .._loop import run_on
from .._registry import WorkflowDef
from .._signals import LoopClosed, Suspend
from .invocation import CURRENT_RUN, CURRENT_STEP, Invocation
from .loop_gone import cancelled_by_closing

__all__ = ["RECANCEL_SECONDS", "Unwound", "main_task", "run_async", "run_sync"]

RECANCEL_SECONDS = 1.0  # how long a run's leftover task has to end before it is cancelled again


@dataclass(frozen=True)
class Unwound:
    """A run's main task suspended: its signal, returned rather than raised out of the task,
    which would keep the traceback, whose frames hold the task and the run (a cycle)."""

    signal: Suspend


def run_async(inv: Invocation, wf: WorkflowDef, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run the workflow as a task on the app's loop (or the caller's, for ``run_async``),
    blocking this thread until the invocation ends."""
    try:
        ended = run_on(inv.event_loop, main_task(inv, wf, args, kwargs))
    except LoopClosed as signal:
        raise inv.lost_loop(str(signal)) from None
    except concurrent.futures.CancelledError:
        if cancelled_by_closing(inv):
            raise inv.lost_loop("its event loop cancelled it as the loop closed") from None
        raise  # the workflow's own: a failure of the run
    if isinstance(ended, Unwound):
        raise ended.signal
    return ended


async def main_task(
    inv: Invocation, wf: WorkflowDef, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    run_token, step_token = CURRENT_RUN.set(inv), CURRENT_STEP.set(None)
    try:
        return await _workflow(inv, wf, args, kwargs)
    finally:  # the task may go on (execute_async): the run is no longer current in it
        CURRENT_STEP.reset(step_token)
        CURRENT_RUN.reset(run_token)


async def _workflow(
    inv: Invocation, wf: WorkflowDef, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    task = asyncio.current_task()
    assert task is not None
    inv.task_paths[task] = ""
    try:
        return await wf.fn(*args, **kwargs)
    except Suspend as signal:
        # Steps other tasks already started must be recorded before the run unwinds.
        inv.suspended = signal
        await _drain(inv)
        return Unwound(signal)
    finally:
        # Only the tasks this run's workflow code created: the loop is shared with other
        # runs, and tasks a client started inside a step belong to that client.
        leftover = [t for t in inv.task_paths if t is not task and not t.done()]
        while waiting := [t for t in leftover if not t.done()]:
            for child in waiting:
                child.cancel()
            # Again after a while: a task cancelled while a transaction held its step's
            # outcome does not see it (the step returns what the journal says).
            await asyncio.wait(waiting, timeout=RECANCEL_SECONDS)
        for child in leftover:
            if not child.cancelled():
                child.exception()  # retrieved: a leftover task's error is not the run's
        # Each task's context holds the run (CURRENT_RUN): a cycle while the run holds them.
        inv.task_paths.clear()


async def _drain(inv: Invocation) -> None:
    while inv.in_flight > 0:
        await asyncio.sleep(0.005)


def run_sync(inv: Invocation, wf: WorkflowDef, args: list[Any], kwargs: dict[str, Any]) -> Any:
    def main() -> Any:
        CURRENT_RUN.set(inv)
        CURRENT_STEP.set(None)
        inv.deferring = True  # see defer_outcome (an async run's tasks journal as they go)
        try:
            return wf.fn(*args, **kwargs)
        finally:
            inv.deferring = False

    return contextvars.copy_context().run(main)
