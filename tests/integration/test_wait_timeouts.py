"""Wait timeouts: ``inf`` and ``timedelta.max`` mean no timeout; NaN and negatives are refused.

A refused timeout raises ``ValueError`` in the workflow (catchable there) before anything is
recorded; an unbounded one suspends the run, which an event, a decision or a cancel still ends.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import stalwart

pytestmark = pytest.mark.timeout(60)

UNBOUNDED = [float("inf"), dt.timedelta.max, dt.timedelta(days=999_999_000), 10**400]
UNBOUNDED_IDS = ["inf", "timedelta.max", "huge timedelta", "huge int"]
REFUSED = [float("nan"), -1, -0.5, dt.timedelta(seconds=-1)]
REFUSED_IDS = ["nan", "-1", "-0.5", "negative timedelta"]


@pytest.fixture
def app(store_url: str) -> Iterator[stalwart.Stalwart]:
    """Waits need time to pass, so these tests use the real clock."""
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def later(seconds: float, action: Callable[[], Any]) -> None:
    def run() -> None:
        time.sleep(seconds)
        action()

    threading.Thread(target=run, daemon=True).start()


@pytest.mark.parametrize("timeout", UNBOUNDED, ids=UNBOUNDED_IDS)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_unbounded_event_wait_suspends_and_an_event_wakes_it(
    app: stalwart.Stalwart, timeout: Any, is_async: bool
) -> None:
    if is_async:

        @app.workflow(name="waiter")
        async def waiter() -> Any:
            return await stalwart.wait_for_event_async("paid", timeout=timeout)

    else:

        @app.workflow(name="waiter")  # type: ignore[no-redef]
        def waiter() -> Any:
            return stalwart.wait_for_event("paid", timeout=timeout)

    later(0.3, lambda: app.send_event("w", "paid", {"n": 1}))
    assert app.run(waiter, workflow_id="w") == {"n": 1}
    names = [e.name for e in app.journal("w") if e.kind == "run"]
    assert "suspended" in names


@pytest.mark.parametrize("timeout", UNBOUNDED[:2], ids=UNBOUNDED_IDS[:2])
def test_an_unbounded_approval_waits_for_a_decision(app: stalwart.Stalwart, timeout: Any) -> None:
    @app.workflow(name="asker")
    def asker() -> bool:
        decision = stalwart.request_approval("refund", {"amount": 5}, timeout=timeout)
        return decision is not None and decision.approved

    def approve() -> None:
        while not app.approvals():
            time.sleep(0.02)
        app.approve("a", by="maria")

    later(0.1, approve)
    assert app.run(asker, workflow_id="a") is True
    assert app.approvals(pending=False)[0].expires_at is None


@pytest.mark.parametrize("seconds", UNBOUNDED[:2], ids=UNBOUNDED_IDS[:2])
def test_an_unbounded_sleep_waits_until_cancelled(app: stalwart.Stalwart, seconds: Any) -> None:
    @app.workflow(name="sleeper")
    def sleeper() -> None:
        stalwart.sleep(seconds)

    later(0.3, lambda: app.cancel("s"))
    with pytest.raises(stalwart.WorkflowCancelled):
        app.run(sleeper, workflow_id="s")
    assert [e.status for e in app.journal("s") if e.kind == "sleep"] == ["scheduled"]


@pytest.mark.parametrize("bad", REFUSED, ids=REFUSED_IDS)
@pytest.mark.parametrize("call", ["sleep", "wait_for_event", "request_approval"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_nan_and_negative_timeouts_raise_value_error_before_anything_is_recorded(
    app: stalwart.Stalwart, bad: Any, call: str, is_async: bool
) -> None:
    def attempt() -> Any:
        if call == "sleep":
            return stalwart.sleep(bad)
        if call == "wait_for_event":
            return stalwart.wait_for_event("x", timeout=bad)
        return stalwart.request_approval("x", timeout=bad)

    async def attempt_async() -> Any:
        if call == "sleep":
            return await stalwart.sleep_async(bad)
        if call == "wait_for_event":
            return await stalwart.wait_for_event_async("x", timeout=bad)
        return await stalwart.request_approval_async("x", timeout=bad)

    if is_async:

        @app.workflow(name="wf")
        async def wf() -> str:
            try:
                await attempt_async()
            except ValueError as exc:
                return f"refused: {exc}"
            return "accepted"

    else:

        @app.workflow(name="wf")  # type: ignore[no-redef]
        def wf() -> str:
            try:
                attempt()
            except ValueError as exc:
                return f"refused: {exc}"
            return "accepted"

    assert app.run(wf, workflow_id="r").startswith("refused: ")
    kinds = {e.kind for e in app.journal("r")}
    assert kinds.isdisjoint({"sleep", "event", "approval"})
