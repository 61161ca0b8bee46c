"""The task factory that gives the tasks workflow code creates their journal paths, on the
app's loop (``stalwart._loop.AppLoop``) and on a caller's loop (``app.run_async``)."""

from __future__ import annotations

import asyncio
from typing import Any

from .invocation import CURRENT_RUN, CURRENT_STEP

__all__ = ["install_task_factory"]


def _task_factory(
    loop: asyncio.AbstractEventLoop, coro: Any, previous: Any = None, **kwargs: Any
) -> asyncio.Task[Any]:
    """Create a task (with the loop's own factory, if it had one) and give it a journal
    path if workflow code, not a step, created it."""
    if previous is not None:
        task: asyncio.Task[Any] = previous(loop, coro, **kwargs)
    else:
        task = asyncio.Task(coro, loop=loop, **kwargs)
    inv = CURRENT_RUN.get()
    if inv is not None and CURRENT_STEP.get() is None:
        inv.adopt_task(task, parent=asyncio.current_task(loop))
    return task


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
    current = loop.get_task_factory()
    if not isinstance(current, _Factory):
        loop.set_task_factory(_Factory(current))
