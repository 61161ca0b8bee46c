"""Steering runs: the operator's verbs on the app (send an event, approve, reject, cancel,
retry, resolve, fork), each one store transaction through :class:`Operator`."""

from __future__ import annotations

from typing import Any

from ._handle import Handle
from ._model import Budget
from ._operator import MISSING, Operator

__all__ = ["Steering"]


class Steering:
    """The app's mixin of operator verbs (``app.approve``, ``app.resolve``, ...)."""

    _operator: Operator

    def _handle(self, workflow_id: str) -> Handle:
        raise NotImplementedError  # the app builds its handles

    def send_event(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        dedup_key: str | None = None,
        by: str | None = None,
    ) -> bool:
        """Send event ``name`` to a run's inbox: ``True`` when delivered, ``False`` for a
        repeat of a ``dedup_key`` the run already got (webhooks arrive at least once, and the
        repeat is ignored). :class:`WorkflowNotFound` for an unknown run,
        :class:`InvalidOperation` for a new event to a completed or cancelled run (a failed
        run still takes events: a redrive may wait for them)."""
        return self._operator.send_event(workflow_id, name, payload, dedup_key, by)

    def approve(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        """Approve the run's pending request (or the one named ``approval_id``)."""
        return self._operator.approve(workflow_id, by, reason, approval_id)

    def reject(
        self,
        workflow_id: str,
        by: str | None = None,
        reason: str | None = None,
        approval_id: str | None = None,
    ) -> None:
        """Reject the run's pending request (or the one named ``approval_id``)."""
        return self._operator.reject(workflow_id, by, reason, approval_id)

    def cancel(self, workflow_id: str, by: str | None = None) -> None:
        """Cancel a run: at once if it waits or has not started, else at its next step boundary."""
        return self._operator.cancel(workflow_id, by)

    def retry(self, workflow_id: str, by: str | None = None, budget: Budget | None = None) -> None:
        """Dead-letter redrive: a ``failed`` run resumes from its failed step with a fresh
        attempt budget; a ``needs_attention`` run (a divergence after a fix was deployed, an
        exhausted compensation, a repaired record, a budget reached) replays again, under
        ``budget`` when given. An in-doubt irreversible step is settled with :meth:`resolve`."""
        return self._operator.retry(workflow_id, by, budget)

    def resolve(
        self,
        workflow_id: str,
        seq: int,
        result: Any = MISSING,
        rerun: bool = False,
        by: str | None = None,
    ) -> None:
        """Settle an in-doubt irreversible step: record ``result`` (which may be ``None``) as
        what happened, or ``rerun=True`` to run it again. The run leaves ``needs_attention``."""
        return self._operator.resolve(workflow_id, seq, result, rerun, by)

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
        plus one raises :class:`InvalidOperation`. The new run is ``pending``: a worker
        executes it, or ``app.run(workflow, workflow_id=handle.workflow_id)`` here (the run
        keeps the source's arguments; those given to ``app.run`` are not used).
        """
        return self._handle(self._operator.fork(workflow_id, from_seq, new_id, allow_reexecute, by))
