"""Compensations that crash their worker: their attempts are counted, and no rollback is lost.

* ``crash_agent.py trip``: three bookings, then ``pay`` fails for good, so the bookings are
  rolled back newest first (car, hotel, flight). While the flag file ``crash-undo_car-<ID>``
  exists, the car's compensation (``Retry(max_attempts=3)``) SIGKILLs its own process. Each
  interrupted attempt is counted: after three of them (or after ``max_recoveries`` crashes, if
  that comes first) the run goes to ``needs_attention`` naming the compensation, never to
  ``failed`` with bookings left unreleased. Once the flag is gone, ``app.retry`` continues the
  rollback with a fresh budget and the run ends ``failed``, every booking refunded once.
* ``crash_agent.py poison_saga``: ``reserve`` (compensated) then a step that SIGKILLs its process
  on every attempt. After ``max_recoveries`` crashes the run is rolled back like any failure
  before it is marked ``failed``: the reservation is released.
"""

from __future__ import annotations

import pytest
from fault_harness import FAILED_EXIT, NEEDS_ATTENTION_EXIT, Exited, Harness, step_entries
from worker_agent import Downstream

pytestmark = pytest.mark.timeout(120)

BOOKINGS = ["flight", "hotel", "car"]


def run_until_not_killed(agent: Harness, scenario: str, wid: str, *extra: str) -> list[Exited]:
    runs: list[Exited] = []
    for _ in range(8):
        exited = agent.run(scenario, wid, extra=list(extra))
        runs.append(exited)
        if not exited.killed:
            break
    return runs


@pytest.mark.parametrize(
    ("max_recoveries", "attempts", "why"),
    [
        (5, 3, "failed after 3 attempt(s)"),  # the compensation's own budget runs out
        (2, 2, "crashed its worker 2 times"),  # the poison rule stops the crash loop first
    ],
)
def test_a_compensation_that_keeps_crashing_its_worker_waits_for_an_operator(
    agent: Harness, max_recoveries: int, attempts: int, why: str
) -> None:
    wid = f"trip-crashing-undo-{max_recoveries}"
    downstream = Downstream(agent.workdir / "downstream.db")
    flag = agent.workdir / f"crash-undo_car-{wid}"
    flag.touch()
    extra = ("--max-recoveries", str(max_recoveries))

    runs = run_until_not_killed(agent, "trip", wid, *extra)
    assert [r.killed for r in runs] == [True] * attempts + [False], [r.describe() for r in runs]
    last = runs[-1]
    assert last.returncode == NEEDS_ATTENTION_EXIT, last.describe()
    reason = last.outcome["reason"]
    assert "compensation of step 'book_car'" in reason, reason
    assert why in reason, reason
    assert "retry" in reason, reason
    undo_car = [e["attempt"] for e in agent.executions(wid) if e["step"] == "undo_car"]
    assert undo_car == list(range(1, attempts + 1))  # each crash cost one attempt
    counts = agent.counts(wid)
    assert "undo_hotel" not in counts and "undo_flight" not in counts  # newest first: waiting
    assert downstream.refunds() == []

    with agent.app() as app:
        assert app.handle(wid).status() == "needs_attention"
        rows = [(e.name, e.status, e.attempt) for e in app.journal(wid) if e.kind == "compensation"]
        assert rows == [("book_car", "failed", n) for n in range(1, attempts + 1)]
        charged = [e.error for e in app.journal(wid) if e.kind == "compensation"]
        assert all(e and e.startswith("AttemptInterrupted") for e in charged), charged
        flag.unlink()  # the cause is fixed
        app.retry(wid, by="oncall")
        assert app.handle(wid).status() == "pending"

    final = agent.run("trip", wid, extra=list(extra))
    assert final.returncode == FAILED_EXIT, final.describe()
    assert "card declined" in final.outcome["error"], final.outcome
    counts = agent.counts(wid)
    assert counts["undo_car"] == attempts + 1
    assert (counts["undo_hotel"], counts["undo_flight"]) == (1, 1)
    assert len(downstream.refunds()) == 3  # every booking refunded, once each
    assert len(downstream.refund_calls()) == 3
    with agent.app() as app:
        assert app.handle(wid).status() == "failed"
        done = [
            e.name for e in app.journal(wid) if e.kind == "compensation" and e.status == "completed"
        ]
        assert done == ["book_car", "book_hotel", "book_flight"]
        for kind in BOOKINGS:
            entries = step_entries(app, wid, f"book_{kind}")
            assert [e.status for e in entries] == ["completed", "compensated"], (kind, entries)


def test_a_poison_run_is_rolled_back_before_it_is_failed(agent: Harness) -> None:
    wid = "poison-saga"
    runs = run_until_not_killed(agent, "poison_saga", wid, "--max-recoveries", "2")
    assert [r.killed for r in runs] == [True, True, False], [r.describe() for r in runs]
    last = runs[-1]
    assert last.returncode == FAILED_EXIT, last.describe()
    assert "crashed its worker 2 times" in last.outcome["error"], last.outcome
    assert agent.counts(wid) == {"reserve": 1, "crashy": 2, "undo_reserve": 1}
    with agent.app() as app:
        assert app.handle(wid).status() == "failed"
        entries = step_entries(app, wid, "reserve")
        assert [e.status for e in entries] == ["completed", "compensated"]
        done = [(e.name, e.status) for e in app.journal(wid) if e.kind == "compensation"]
        assert done == [("reserve", "completed")]
        crashed = step_entries(app, wid, "crashy")  # both killed attempts are charged
        assert [(e.status, e.attempt) for e in crashed] == [("failed", 1), ("failed", 2)]
        assert app.usage(wid).attempts == 4  # reserve, crashy twice, its undo
