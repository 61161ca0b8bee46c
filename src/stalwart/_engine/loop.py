"""The task factory that gives the tasks workflow code creates their journal paths, on the
app's loop (``stalwart._loop.AppLoop``) and on a caller's loop (``app.run_async``).

A task created while the garbage collector runs is no task of the workflow's: a finalizer made
it (``__del__`` of garbage the collector found, such as an SDK's unclosed HTTP client that
closes itself with ``loop.create_task(self.aclose())``). A collection starts wherever the
process's allocations make it start, so such a task gets no path, which would shift the places
of the tasks the workflow creates after it and so their calls' journal positions, and it runs
outside the run (its context has no run), where nothing it does is journaled.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
from typing import Any

from .._store.group_commit import own_loop
from .invocation import CURRENT_RUN, CURRENT_STEP

__all__ = ["install_task_factory", "prepare_app_loop"]

_collecting: int | None = None  # the thread the garbage collector runs in, while it runs


def _note_collection(phase: str, info: dict[str, int]) -> None:
    """(A ``gc.callbacks`` hook) Note the thread a collection runs in, while it runs."""
    global _collecting
    _collecting = threading.get_ident() if phase == "start" else None


def _task_factory(
    loop: asyncio.AbstractEventLoop, coro: Any, previous: Any = None, **kwargs: Any
) -> asyncio.Task[Any]:
    """Create a task (with the loop's own factory, if it had one) and give it a journal
    path if workflow code, not a step or a finalizer, created it."""
    inv = CURRENT_RUN.get()
    finalizer = inv is not None and _collecting == threading.get_ident()
    if finalizer:  # created in the run's absence (a factory of the loop's may take no context)
        detached = _outside_the_run(kwargs.pop("context", None))
        return detached.run(_created, loop, coro, previous, **kwargs)
    task = _created(loop, coro, previous, **kwargs)
    if inv is not None and CURRENT_STEP.get() is None:
        inv.adopt_task(task, parent=asyncio.current_task(loop))
    return task


def _created(
    loop: asyncio.AbstractEventLoop, coro: Any, previous: Any, **kwargs: Any
) -> asyncio.Task[Any]:
    """The task, made by the loop's own factory if it had one (in the current context)."""
    if previous is not None:
        task: asyncio.Task[Any] = previous(loop, coro, **kwargs)
        return task
    return asyncio.Task(coro, loop=loop, **kwargs)


def _outside_the_run(context: contextvars.Context | None) -> contextvars.Context:
    """A copy of ``context`` (or of the current one) in which no run or step is current."""
    detached = (context if context is not None else contextvars.copy_context()).copy()
    detached.run(CURRENT_RUN.set, None)
    detached.run(CURRENT_STEP.set, None)
    return detached


class _Factory:
    """The task factory stalwart installs, wrapping whatever factory the loop had."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        return _task_factory(loop, coro, self.previous, **kwargs)


def install_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    """Let ``loop`` name the tasks workflow code creates (once per loop; a factory the loop
    already has keeps creating the tasks)."""
    if _note_collection not in gc.callbacks:
        gc.callbacks.append(_note_collection)
    current = loop.get_task_factory()
    if not isinstance(current, _Factory):
        loop.set_task_factory(_Factory(current))


def prepare_app_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Prepare the loop an app keeps for its own async runs (``AppLoop``): its task factory,
    and its writes' leave to commit in place when nothing else on it is ready to run."""
    install_task_factory(loop)
    own_loop(loop)
