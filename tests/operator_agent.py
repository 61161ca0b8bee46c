"""The workflows an operator acts on, for the HTTP API's tests and ``stalwart mcp``'s: declared on
the test's app (whose worker runs them in a thread) while ``stalwart ui`` or ``stalwart mcp``
serves the same store from its own process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import stalwart

__all__ = ["declare"]


def declare(app: stalwart.Stalwart, workdir: Path) -> dict[str, Any]:
    """Declare the workflows on ``app``; the ones a test starts, by name.

    ``flaky`` fails until ``WORKDIR/fixed`` exists (a dead-lettered run a fix lets a retry
    finish); ``charge`` is irreversible and stands in for a crash right after its effect while
    ``WORKDIR/crash`` exists (an in-doubt step, settled with resolve)."""

    @app.step(name="flaky", retry=stalwart.Retry.never())
    def flaky(x: int) -> int:
        if not (workdir / "fixed").exists():
            raise ValueError(f"broken until fixed: {x}")
        return x + 1

    @app.step(name="charge", irreversible=True)
    def charge(order: str) -> str:
        if (workdir / "crash").exists():
            raise KeyboardInterrupt  # a crash right after the effect took place
        return f"ch_{order}"

    @app.workflow(name="ask")
    def ask(subject: str) -> str:
        decision = stalwart.request_approval(subject, details={"subject": subject})
        return "approved" if decision is not None and decision.approved else "rejected"

    @app.workflow(name="dead")
    def dead(x: int) -> int:
        return flaky(x)

    @app.workflow(name="inbox")
    def inbox() -> Any:
        return stalwart.wait_for_event("ping", timeout=3600)

    @app.workflow(name="pay")
    def pay(order: str) -> str:
        return charge(order)

    return {"ask": ask, "dead": dead, "inbox": inbox, "pay": pay}
