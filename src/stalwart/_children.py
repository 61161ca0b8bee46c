"""Child runs inside a workflow: ``start_child`` / ``run_child`` and :class:`ChildHandle`.

A child is a run of its own (any worker may execute it, ``app.run`` executes it in-process
when no worker takes it first), journaled in its parent as ``kind`` ``child``; waiting on it is
a durable wait. See ``_engine/children.py`` for how it is recorded and woken.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._declare import check_queue_name, definition_of, encode_args
from ._engine import children as _children
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, Invocation
from ._errors import WorkflowOnlyCall
from ._model import run_id

__all__ = ["ChildHandle", "run_child", "run_child_async", "start_child", "start_child_async"]


class ChildHandle:
    """A child run started by the current workflow: its id, and a durable wait for its end."""

    def __init__(self, invocation: Invocation, ref: _children.ChildRef) -> None:
        self._invocation = invocation
        self._ref = ref

    @property
    def workflow_id(self) -> str:
        """The child run's id (``"<parent id>/<position>"`` unless one was given)."""
        return self._ref.workflow_id

    def __repr__(self) -> str:
        return f"ChildHandle({self._ref.workflow_id!r})"

    def result(self) -> Any:
        """The child's result; raises ``WorkflowFailed`` (carrying the child's error) or
        ``WorkflowCancelled`` if it ended so. The parent holds nothing while it waits."""
        inv = _workflow("ChildHandle.result", is_async=False)
        return _children.result(inv, self._ref)

    async def result_async(self) -> Any:
        """The async twin of :meth:`result`, for ``async def`` workflows."""
        inv = _workflow("ChildHandle.result", is_async=True)
        await asyncio.sleep(0)  # concurrent siblings start their children before any waits
        return await _children.result_async(inv, self._ref)

    def cancel(self) -> None:
        """Cancel the child run: it stops at its next step boundary (at once if it waits)
        and its compensations run; :meth:`result` then raises ``WorkflowCancelled``.
        Journaled in the parent, so a replay does not cancel it again. A plain call in
        ``async def`` workflows too (it does not wait for the child to stop)."""
        inv = _workflow("ChildHandle.cancel", is_async=_in_async_run())
        if inv is not self._invocation:
            raise RuntimeError(
                f"child {self._ref.workflow_id!r} was not started by this execution of run "
                f"{inv.workflow_id!r}; cancel a ChildHandle in the workflow run that started it"
            )
        _children.cancel(inv, self._ref)


def _in_async_run() -> bool:
    """Whether the current run, if any, is an ``async def`` workflow (for the calls that
    are the same in both)."""
    inv = CURRENT_RUN.get()
    return inv is not None and inv.is_async


def _workflow(call: str, *, is_async: bool) -> Invocation:
    if CURRENT_STEP.get() is not None:
        raise WorkflowOnlyCall(
            f"{call}() was called inside a step; child runs belong in workflow code"
        )
    inv = CURRENT_RUN.get()
    if inv is None:
        raise RuntimeError(
            f"{call}() can only be called inside a workflow; outside one, start a run "
            "with app.start(...)"
        )
    if inv.is_async and not is_async:
        twin = "handle.result_async()" if call == "ChildHandle.result" else f"{call}_async(...)"
        raise TypeError(f"{call}() blocks; in an async def workflow use 'await {twin}'")
    if is_async and not inv.is_async:
        raise TypeError(f"the async twin of {call}() is for async def workflows; call {call}()")
    return inv


def _start(
    call: str,
    wf: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    is_async: bool,
    workflow_id: str | None,
    queue: str | None,
    detached: bool = False,
) -> tuple[Invocation, Any]:
    """The current run, and the engine's start of the child in it: its ``ChildRef``, or
    (``is_async``) a coroutine to await for it."""
    inv = _workflow(call, is_async=is_async)
    if not isinstance(detached, bool):
        raise TypeError(f"{call}(detached={detached!r}): pass True or False")
    definition = definition_of(inv.runtime, wf)
    if queue is not None:
        check_queue_name(queue)
    child_id = None if workflow_id is None else run_id(workflow_id)
    payload = encode_args(inv.runtime, definition, args, kwargs)
    engine = _children.start_async if is_async else _children.start
    return inv, engine(inv, definition, payload, child_id, queue, detached=detached)


def start_child(
    wf: Any,
    *args: Any,
    workflow_id: str | None = None,
    queue: str | None = None,
    detached: bool = False,
    **kwargs: Any,
) -> ChildHandle:
    """Start workflow ``wf`` as a child run of the current workflow and return its handle.

    The start is journaled in the parent: its default id, ``"<parent id>/<position>"``, is
    the same on every replay, so a replay finds the same child. An id owned by another workflow
    or parent raises ``WorkflowAlreadyExists``. ``queue`` defaults to the workflow's. A
    ``detached`` child outlives its parent: it is not cancelled with it, not covered by its
    deadline and not retried by its retry (its ``parent_id`` is still recorded)."""
    inv, ref = _start(
        "stalwart.start_child",
        wf,
        args,
        kwargs,
        is_async=False,
        workflow_id=workflow_id,
        queue=queue,
        detached=detached,
    )
    return ChildHandle(inv, ref)


async def start_child_async(
    wf: Any,
    *args: Any,
    workflow_id: str | None = None,
    queue: str | None = None,
    detached: bool = False,
    **kwargs: Any,
) -> ChildHandle:
    """The async twin of :func:`start_child`, for ``async def`` workflows."""
    inv, starting = _start(
        "stalwart.start_child",
        wf,
        args,
        kwargs,
        is_async=True,
        workflow_id=workflow_id,
        queue=queue,
        detached=detached,
    )
    return ChildHandle(inv, await starting)


def run_child(
    wf: Any, *args: Any, workflow_id: str | None = None, queue: str | None = None, **kwargs: Any
) -> Any:
    """Start a child run and wait durably for its result (:func:`start_child`, then
    :meth:`ChildHandle.result`)."""
    inv, ref = _start(
        "stalwart.run_child", wf, args, kwargs, is_async=False, workflow_id=workflow_id, queue=queue
    )
    return _children.result(inv, ref)


async def run_child_async(
    wf: Any, *args: Any, workflow_id: str | None = None, queue: str | None = None, **kwargs: Any
) -> Any:
    """The async twin of :func:`run_child`; ``asyncio.gather`` several for a fan-out."""
    inv, starting = _start(
        "stalwart.run_child", wf, args, kwargs, is_async=True, workflow_id=workflow_id, queue=queue
    )
    ref = await starting
    await asyncio.sleep(0)  # concurrent siblings start their children before any waits
    return await _children.result_async(inv, ref)
