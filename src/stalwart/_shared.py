"""The shared context (docs/shared-context.md): versioned keys that runs and clients read and
write by compare-and-set, with the history of every write.

``stalwart.shared_get`` / ``stalwart.shared_set`` are journaled in workflow code (a replay
sees the answers the first execution got) and are plain store calls inside a step (``by`` is
the run's id; a retried step writes again, so write there with ``if_version``); the app's
``shared_get`` / ``shared_set`` / ``shared_history`` work from outside any run.
"""

from __future__ import annotations

from typing import Any

from ._engine import shared as _shared
from ._engine.invocation import CURRENT_RUN, CURRENT_STEP, Invocation
from ._model import SharedWrite, Versioned
from ._runtime import Runtime

__all__ = ["SharedContext", "shared_get", "shared_set"]


def _where(call: str) -> tuple[Invocation, bool]:
    """The run this code belongs to, and whether it is workflow code (journaled)."""
    scope = CURRENT_STEP.get()
    if scope is not None:
        return scope.invocation, False
    inv = CURRENT_RUN.get()
    if inv is None:
        raise RuntimeError(
            f"stalwart.{call}() can only be called inside a workflow or step; outside a run "
            f"use app.{call}(...)"
        )
    return inv, True


def shared_get(key: str) -> Versioned:
    """The shared ``key``'s value and version (``Versioned(None, 0)`` when never written).

    In workflow code the answer is journaled, so a replay sees the same value and version
    even if others wrote since; in a step it is a plain read of the store."""
    key = _shared.check_key(key, "shared_get")
    inv, journaled = _where("shared_get")
    if journaled:
        return _shared.read_journaled(inv, key)
    with inv.journaling():
        return _shared.read(inv.runtime, key)


def shared_set(key: str, value: Any, *, if_version: int | None = None) -> Versioned | None:
    """Write ``value`` as the shared ``key``'s next version and return it, or, with
    ``if_version``, only if the key is still at that version: ``None`` when another writer
    moved it (read again and retry). Every write is kept with the writing run's id.

    In workflow code the write and its journal entry are one transaction, so a replay
    returns what it decided and never writes again; in a step it is a plain write."""
    key = _shared.check_key(key, "shared_set")
    if_version = _shared.check_if_version(if_version, "shared_set")
    inv, journaled = _where("shared_set")
    payload = _shared.encode_value(
        inv.runtime, key, value, f"run {inv.workflow_id!r}: stalwart.shared_set"
    )
    if journaled:
        return _shared.write_journaled(inv, key, payload, if_version)
    with inv.journaling():
        return _shared.write(inv.runtime, key, payload, if_version, inv.workflow_id)


class SharedContext:
    """The shared-context methods of :class:`~stalwart.Stalwart`, for code outside runs."""

    _runtime: Runtime

    def shared_get(self, key: str) -> Versioned:
        """The shared ``key``'s value and version (``Versioned(None, 0)`` when never
        written)."""
        return _shared.read(self._runtime, _shared.check_key(key, "app.shared_get"))

    def shared_set(
        self, key: str, value: Any, *, if_version: int | None = None, by: str | None = None
    ) -> Versioned | None:
        """Write ``value`` as the shared ``key``'s next version (with ``if_version``, only
        if the key is still at that version: ``None`` when it moved). ``by`` says who wrote
        in the history (default: this process's user)."""
        key = _shared.check_key(key, "app.shared_set")
        if_version = _shared.check_if_version(if_version, "app.shared_set")
        who = _shared.who(by, "app.shared_set")
        payload = _shared.encode_value(self._runtime, key, value, "app.shared_set")
        return _shared.write(self._runtime, key, payload, if_version, who)

    def shared_history(self, key: str) -> list[SharedWrite]:
        """Every write of the shared ``key``, oldest first, with who wrote it and when."""
        return _shared.history(self._runtime, _shared.check_key(key, "app.shared_history"))
