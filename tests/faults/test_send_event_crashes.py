"""``send_event`` from workflow code delivers each event exactly once when the sender's
worker is SIGKILLed, on SQLite and PostgreSQL; deliveries are counted in the target's
journal (one ``send-event`` entry per event stored in its inbox):

* killed after a send was journaled (in the step right after it): the replay on another
  worker finds the send in the journal and does not send it again;
* killed before a send (in the step right before it): recovery sends it, once;
* killed at an arbitrary moment of several senders' runs: every event arrives once.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from fault_harness import WorkerHarness
from message_agent import HANG_ENV, PAUSE_ENV, declare

import stalwart

AGENT = Path(__file__).with_name("message_agent.py")

pytestmark = pytest.mark.timeout(120)


def start(workers: WorkerHarness, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return workers.start(program=AGENT, concurrency=4, env=env)


def delivered(app: stalwart.Stalwart, target: str) -> Counter[tuple[str, str]]:
    """How often each (sender, dedup key) was delivered to ``target``."""
    return Counter(
        (e.by, e.input["dedup_key"])
        for e in app.journal(target)
        if e.kind == "operator" and e.name == "send-event"
    )


@pytest.mark.parametrize("where", ["after", "before"])
def test_a_kill_around_a_send_delivers_it_exactly_once(workers: WorkerHarness, where: str) -> None:
    wid, n = "sender", 4
    first = start(workers, env={HANG_ENV: f"{wid}:{where}:2"})
    app = stalwart.Stalwart(workers.url)
    try:
        wf = declare(app)
        inbox = app.start(wf["inbox"], n, workflow_id="inbox")
        handle = app.start(wf["sender"], "inbox", n, workflow_id=wid)
        workers.wait_for(workers.marker(wid, where).exists, f"the {where} step hangs", 60, [first])
        sends_so_far = 3 if where == "after" else 2
        assert sum(delivered(app, "inbox").values()) == sends_so_far
        workers.kill(first)
        start(workers)  # takes the run over at once: the dead worker's pid is gone
        assert handle.result(timeout=60) == [True] * n
        assert inbox.result(timeout=60) == list(range(n))
        counts = delivered(app, "inbox")
        assert counts == Counter({(wid, f"{wid}/{3 * i + 1}"): 1 for i in range(n)}), counts
        sends = [e for e in app.journal(wid) if e.kind == "send"]
        assert len(sends) == n  # one journal row per send, none written twice
        # the step around the kill ran again (it never finished); the send did not
        steps = Counter((line["step"], line["i"]) for line in workers.executions(wid))
        assert steps[(where, 2)] == 2 and sum(steps.values()) == 2 * n + 1
    finally:
        app.close()


def test_a_worker_killed_mid_run_delivers_every_event_once(workers: WorkerHarness) -> None:
    slow = {PAUSE_ENV: "0.02"}
    victim, survivor = start(workers, env=slow), start(workers, env=slow)
    app = stalwart.Stalwart(workers.url)
    try:
        wf = declare(app)
        senders, n = [f"s{i}" for i in range(4)], 10
        inbox = app.start(wf["inbox"], len(senders) * n, workflow_id="inbox")
        handles = [app.start(wf["sender"], "inbox", n, workflow_id=s) for s in senders]
        workers.wait_for(
            lambda: sum(delivered(app, "inbox").values()) >= 10, "a quarter of the sends", 60
        )
        workers.kill(victim)
        assert sum(delivered(app, "inbox").values()) < len(senders) * n  # not over yet
        start(workers, env=slow)
        for handle in handles:
            assert handle.result(timeout=90) == [True] * n
        assert sorted(inbox.result(timeout=60)) == sorted(list(range(n)) * len(senders))
        counts = delivered(app, "inbox")
        assert set(counts.values()) == {1} and len(counts) == len(senders) * n
        assert survivor.poll() is None, workers.describe()
    finally:
        app.close()
