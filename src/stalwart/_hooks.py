"""The engine's hook points, for telemetry: around one execution of a run and around each
step attempt and wait in it.

An :class:`Observer` (metrics, traces) is told when a worker takes a run and asked, as each
execution begins, for the :class:`RunHooks` of that execution (``None``: it has nothing to do
with this one). The engine calls the hooks only for what happens live: an attempt that is
recorded now, a wait decided or suspended on now; replayed history calls nothing, so telemetry
stays quiet while a run catches up with its journal. With no observer installed the engine
checks one attribute per step and calls nothing.

The methods here do nothing; observers override what they need.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._model import Usage

__all__ = ["Observer", "RunHooks", "combine"]


class RunHooks:
    """What an observer does during one execution of a run."""

    def current(self) -> contextlib.AbstractContextManager[Any]:
        """Around the execution, in the thread that runs it (a span made current)."""
        return contextlib.nullcontext()

    def attempt(self, step: str, seq: int, attempt: int) -> Any:
        """A step attempt begins; returns what ``attempt_current`` and ``attempt_ended`` get."""
        return None

    def attempt_current(self, token: Any) -> contextlib.AbstractContextManager[Any]:
        """Around the step function, where it runs."""
        return contextlib.nullcontext()

    def attempt_ended(
        self,
        token: Any,
        *,
        step: str,
        seq: int,
        attempt: int,
        outcome: str,
        seconds: float | None,
        usage: Usage | None,
    ) -> None:
        """An attempt's outcome was recorded: ``completed``, ``failed``, ``timeout`` or
        ``interrupted``; ``seconds`` is how long it ran here (``None`` when it did not)."""

    def waited(self, kind: str, name: str, started: float, ended: float, outcome: str) -> None:
        """A wait was decided (``outcome`` its winner) or the run suspended on it."""

    def ended(self, status: str) -> None:
        """The execution ended: the run's status (or ``suspended``, ``lease_lost``, ...)."""


class Observer:
    """Telemetry of one process: told about takes, asked for each execution's hooks."""

    def carried(self) -> str | None:
        """What a run created now carries from its caller (the current trace context)."""
        return None

    def took(self, workflow: str, waited: float, *, takeover: bool) -> None:
        """A worker took a run ``waited`` seconds after it became runnable; ``takeover``
        when it was another holder's (that stopped, or whose lease lapsed)."""

    def run(self, *, workflow: str, workflow_id: str, trace_context: str | None) -> RunHooks | None:
        """An execution of a run begins: its hooks, or ``None``."""
        return None


class _Both(RunHooks):
    """Several observers' hooks, called in order."""

    def __init__(self, hooks: list[RunHooks]) -> None:
        self.hooks = hooks

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for hook in self.hooks:
                stack.enter_context(hook.current())
            yield

    def attempt(self, step: str, seq: int, attempt: int) -> Any:
        return [hook.attempt(step, seq, attempt) for hook in self.hooks]

    @contextlib.contextmanager
    def attempt_current(self, token: Any) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for hook, one in zip(self.hooks, token, strict=True):
                stack.enter_context(hook.attempt_current(one))
            yield

    def attempt_ended(self, token: Any, **fields: Any) -> None:
        for hook, one in zip(self.hooks, token or [None] * len(self.hooks), strict=True):
            hook.attempt_ended(one, **fields)

    def waited(self, kind: str, name: str, started: float, ended: float, outcome: str) -> None:
        for hook in self.hooks:
            hook.waited(kind, name, started, ended, outcome)

    def ended(self, status: str) -> None:
        for hook in self.hooks:
            hook.ended(status)


def combine(hooks: list[RunHooks | None]) -> RunHooks | None:
    """The hooks that apply, as one (``None`` when none does)."""
    found = [hook for hook in hooks if hook is not None]
    if not found:
        return None
    return found[0] if len(found) == 1 else _Both(found)
