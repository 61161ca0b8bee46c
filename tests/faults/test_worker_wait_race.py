"""An event and the timeout of ``wait_for_event`` race; replays after worker kills agree.

Eight runs wait for event ``x`` with a 1.5 s timeout; the test sends each run its event at a
different offset around that run's own deadline (read from the journal), from well before
(the event must win) to well after (the timer must win). Whichever won is journaled once. The
step after the wait then hangs and its worker is SIGKILLed, twice (once in each of the two steps
after the wait): every new worker replays the wait, and the steps and the result all see the
value the first worker recorded; no wait is decided twice.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fault_harness import WorkerHarness, completed_twice

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 1.5
OFFSETS = [-0.6, -0.1, -0.03, 0.0, 0.03, 0.1, 0.3, 1.5]  # seconds after the run's deadline


def event_entries(app: Any, wid: str) -> list[Any]:
    return [e for e in app.journal(wid) if e.kind == "event"]


def test_event_and_timeout_race_replays_the_recorded_winner(workers: WorkerHarness) -> None:
    app, wf = workers.app()
    concurrency = len(OFFSETS) + 2
    first = workers.start(hang=["after_race"], concurrency=concurrency)
    wids = [f"race-{i}" for i in range(len(OFFSETS))]
    for wid in wids:
        app.start(wf["race_agent"], TIMEOUT, workflow_id=wid)

    deadlines: dict[str, float] = {}

    def all_waiting() -> bool:
        for wid in wids:
            if wid not in deadlines:
                opened = [e for e in event_entries(app, wid) if e.status == "scheduled"]
                if not opened:
                    return False
                deadlines[wid] = opened[0].input["until"]
        return True

    workers.wait_for(all_waiting, "every run waits for x", 20, [first])
    schedule = sorted(
        (deadlines[wid] + offset, wid, offset) for wid, offset in zip(wids, OFFSETS, strict=True)
    )
    sent: dict[str, float] = {}
    for at, wid, offset in schedule:
        time.sleep(max(0.0, at - time.time()))
        app.send_event(wid, "x", {"sent_at_offset": offset})
        sent[wid] = time.time() - deadlines[wid]

    def all_after() -> bool:
        return all(workers.marker(wid, "after_race").exists() for wid in wids)

    workers.wait_for(all_after, "every run reached after_race", 20, [first])

    winners: dict[str, Any] = {}
    for wid in wids:
        decided = [e for e in event_entries(app, wid) if e.status == "completed"]
        assert len(decided) == 1, (wid, event_entries(app, wid))
        winners[wid] = decided[0].output  # the payload, or None when the timer won
    # Well before the deadline the event wins; well after it the timer does.
    assert winners[wids[0]] == {"sent_at_offset": OFFSETS[0]}, (winners, sent)
    assert winners[wids[-1]] is None, (winners, sent)

    workers.kill(first)  # replay #1: the wait again, after_race again (it was interrupted)
    second = workers.start(hang=["final_race"], concurrency=concurrency)

    def all_final() -> bool:
        return all(workers.marker(wid, "final_race").exists() for wid in wids)

    workers.wait_for(all_final, "every run reached final_race", 20, [second])
    workers.kill(second)  # replay #2: the wait and after_race from the journal
    workers.start(concurrency=concurrency)

    for wid in wids:
        winner = winners[wid]
        assert app.handle(wid).result(timeout=20) == {
            "got": winner,
            "after": winner,
            "final": winner,
        }, (wid, sent[wid])
        seen = [(e["step"], e["got"]) for e in workers.executions(wid)]
        assert seen == [
            ("after_race", winner),
            ("after_race", winner),
            ("final_race", winner),
            ("final_race", winner),
        ], (wid, seen)
        assert len([e for e in event_entries(app, wid) if e.status == "completed"]) == 1
        assert completed_twice(app, wid) == []
