"""Whether a run's async code was cancelled by its event loop closing, not by its own code.

The app's loop says so itself (``AppLoop.closing`` is set before it cancels its tasks). A
caller's loop under ``app.run_async`` gives no such sign: ``asyncio.run`` ending (Ctrl-C, the
caller's ``wait_for`` timing out) cancels every task left on it, the run's among them, after
the caller's own task. So the caller's task marks the invocation when it is cancelled
(``caller_gone``), and a cancellation of the run's task counts as the loop's once that mark is
set or the loop has closed, within a short grace: the run is then given back, not failed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .invocation import Invocation

__all__ = ["cancelled_by_closing"]

# How long a cancelled run waits for its caller's mark before the cancellation counts as the
# workflow's own (its caller's task is cancelled first: the mark follows at once).
CLOSING_GRACE_S = 0.5


def cancelled_by_closing(inv: Invocation) -> bool:
    """Whether the cancellation of ``inv``'s async code came from its loop closing."""
    loop, gone = inv.loop, inv.caller_gone
    if loop is None:  # the app's own loop
        return inv.runtime.loop.closing
    deadline = time.monotonic() + CLOSING_GRACE_S
    while not (loop.is_closed() or (gone is not None and gone.is_set())):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
