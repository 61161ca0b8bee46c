"""The store roles of runs that work together: children a parent starts, events one run sends
another, and the shared context every run and client reads and writes (see ``base``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .rows import Entry, RunRow, SharedRow, SharedSet

__all__ = ["ChildStore", "MessageStore", "SharedStore"]


class ChildStore(Protocol):
    """Child runs: started by a parent that holds its lease, found by their parent."""

    def start_child(
        self,
        parent_id: str,
        entry: Entry,
        *,
        owner: str,
        workflow_id: str,
        name: str,
        queue: str,
        input: bytes,
        now: float,
        started: Entry,
        deadline: float | None = None,
        trace_context: str | None = None,
        detached: bool = False,
    ) -> str:
        """Create a pending child run (``detached``: one its parent's cancel and retry
        pass by) and journal ``entry`` in the held parent, in one transaction: ``"started"``,
        ``"exists"`` (this parent's child of that workflow), ``"taken"`` (another workflow's
        or parent's id; nothing written), ``"lost"`` or ``"cancelling"`` (the parent's cancel
        was requested; nothing written)."""

    def child_runs(self, parent_id: str, *, attached: bool = False) -> list[RunRow]:
        """The children of a run, oldest first (``attached``: not the detached ones)."""


class MessageStore(Protocol):
    """Events one run sends another."""

    def send_event(
        self,
        sender_id: str,
        entry: Entry,
        *,
        owner: str,
        workflow_id: str,
        name: str,
        payload: bytes | None,
        dedup_key: str,
        now: float,
        delivery: Entry,
        outcome: Callable[[str, str], Entry],
    ) -> str:
        """Deliver an event to run ``workflow_id`` and journal ``outcome(verdict, message)``
        in the held sender, in one transaction: ``"delivered"``, ``"duplicate"``,
        ``"missing"``, ``"ended"`` or ``"lost"`` (nothing written)."""


class SharedStore(Protocol):
    """The shared context: versioned keys any run or client reads and writes."""

    def read_shared(self, key: str) -> SharedRow | None:
        """The latest write of ``key``; ``None`` when it was never written."""

    def shared_history(self, key: str) -> list[SharedRow]:
        """Every write of ``key``, oldest first."""

    def write_shared(
        self,
        key: str,
        value: bytes,
        *,
        if_version: int | None,
        by: str,
        now: float,
        workflow_id: str | None = None,
        owner: str | None = None,
        entry: Entry | None = None,
        encode_result: Callable[[int | None], bytes] | None = None,
    ) -> SharedSet:
        """Write ``key`` as its next version, only if its version is still ``if_version``
        (when given); done once even when retried after a lost acknowledgement. With
        ``entry``, journal it for run ``workflow_id`` in the same transaction, fenced by
        ``owner``'s lease, its output ``encode_result(version written or None)``."""
