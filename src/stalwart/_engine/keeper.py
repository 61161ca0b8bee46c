"""The lease keeper: renews the leases of the runs this process executes, and tells them
when an operator asked to cancel them."""

from __future__ import annotations

import json
import logging
import threading
import time

from .._runtime import Runtime
from .._store.base import LeaseStore
from .invocation import Invocation, StepScope

__all__ = ["LeaseKeeper"]

log = logging.getLogger("stalwart")
CANCEL_POLL_SECONDS = 0.25


class LeaseKeeper:
    """Renews the leases of the runs this process executes, in the background."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.store: LeaseStore = runtime.store  # it renews, publishes and reads cancels only
        self.held: dict[str, Invocation] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._published: dict[str, StepScope | None] = {}

    def hold(self, inv: Invocation) -> None:
        with self._lock:
            self.held[inv.workflow_id] = inv
        self.start()

    def start(self) -> None:
        """Start the renewal thread (once)."""
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="stalwart-leases", daemon=True
                )
                self._thread.start()

    def request_cancel(self, workflow_id: str) -> None:
        """An operator cancelled a run: if this process executes it, tell it now."""
        with self._lock:
            held = self.held.get(workflow_id)
        if held is not None:
            held.cancel_requested.set()

    def drop(self, workflow_id: str) -> None:
        with self._lock:
            self.held.pop(workflow_id, None)
            self._published.pop(workflow_id, None)

    def _publish(self, inv: Invocation) -> None:
        """Tell operators which step the run executes now, when that changed (a step shorter
        than one poll is never published: it costs nothing)."""
        scope = inv.current_step
        if self._published.get(inv.workflow_id) is scope:
            return
        current = None
        if scope is not None:
            current = json.dumps(
                {
                    "name": scope.name,
                    "seq": scope.seq,
                    "attempt": scope.attempt,
                    "started_at": scope.started_at,
                    "undo": bool(scope.suffix),  # a compensation's attempt
                    # with the lease's expiry, when the holder was last alive (interrupted.py)
                    "lease_seconds": self.runtime.lease_seconds,
                }
            )
        try:
            self.store.publish_step(inv.workflow_id, owner=inv.owner, current=current)
        except Exception:  # what operators read only: the next poll tries again
            log.debug("run %s: publishing its current step failed", inv.workflow_id, exc_info=True)
            return
        self._published[inv.workflow_id] = scope

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        renew_every = max(0.05, self.runtime.lease_seconds / 3)
        next_renewal = time.monotonic() + renew_every
        while not self._wake.wait(CANCEL_POLL_SECONDS):
            with self._lock:
                held = list(self.held.values())
            if not held:
                continue
            try:
                cancelled = self.store.cancel_requested_for(self.runtime.holder + "#")
            except Exception:
                log.warning("cancel poll failed", exc_info=True)
                cancelled = set()
            for inv in held:
                if inv.workflow_id in cancelled:
                    inv.cancel_requested.set()
                self._publish(inv)
            if time.monotonic() < next_renewal:
                continue
            next_renewal = time.monotonic() + renew_every
            for inv in held:
                until = self.runtime.clock.time() + self.runtime.lease_seconds
                try:
                    ok = self.store.renew_lease(inv.workflow_id, owner=inv.owner, lease_until=until)
                except Exception:  # the store is unreachable: the next round tries again
                    log.warning("run %s: lease renewal failed", inv.workflow_id, exc_info=True)
                    continue
                if ok is None:
                    inv.lease_lost.set()
                elif ok:
                    inv.cancel_requested.set()
