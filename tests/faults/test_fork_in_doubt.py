"""A fork of a run with an irreversible step in doubt must not repeat its effect.

``crash_agent.py pay_unverified`` runs ``quote`` (seq 1), then the irreversible ``pay`` with no
``verify`` (seq 2), which charges downstream and then hangs; the test SIGKILLs the process there.
The charge is made, the journal says only ``scheduled``. A fork re-executes ``pay`` under the
fork's own idempotency key, so even an idempotent downstream would charge twice: every
``from_seq`` is refused with ``UnsafeFork`` (before and after the recovery marks the step
``in_doubt``) unless ``allow_reexecute=True``; a ``from_seq`` past the journal's end plus one is
an ``InvalidOperation``, from the API and from ``stalwart fork``.
"""

from __future__ import annotations

import pytest
from fault_harness import NEEDS_ATTENTION_EXIT, Harness, cli, step_entries
from worker_agent import Downstream

import stalwart

pytestmark = pytest.mark.timeout(60)

END = 2  # quote is seq 1, pay seq 2: the journal's last seq


def refuses_every_fork(app: stalwart.Stalwart, wid: str) -> None:
    for from_seq in range(1, END + 2):
        with pytest.raises(stalwart.UnsafeFork, match=r"'pay' \(seq 2\).*in doubt"):
            app.fork(wid, from_seq, new_id=f"{wid}-fork-{from_seq}")
    with pytest.raises(stalwart.InvalidOperation, match=f"from_seq={END + 2}"):
        app.fork(wid, END + 2)
    assert [w.workflow_id for w in app.list_workflows()] == [wid]  # nothing was created


def test_a_fork_of_a_run_in_doubt_is_refused(agent: Harness) -> None:
    wid = "fork-in-doubt"
    downstream = Downstream(agent.workdir / "downstream.db")
    agent.crash("pay_unverified", wid, at=["pay"])
    assert agent.counts(wid) == {"quote": 1, "pay": 1}
    assert len(downstream.calls()) == 1

    with agent.app() as app:  # killed: pay is scheduled, with no outcome
        assert [e.status for e in step_entries(app, wid, "pay")] == ["scheduled"]
        refuses_every_fork(app, wid)

    second = agent.run("pay_unverified", wid)
    assert second.returncode == NEEDS_ATTENTION_EXIT, second.describe()
    with agent.app() as app:  # recovered: pay is in_doubt
        assert [e.status for e in step_entries(app, wid, "pay")] == ["scheduled", "in_doubt"]
        refuses_every_fork(app, wid)
        for from_seq in range(1, END + 2):
            handle = app.fork(wid, from_seq, new_id=f"{wid}-again-{from_seq}", allow_reexecute=True)
            assert handle.status() == "pending"
        with pytest.raises(stalwart.InvalidOperation):
            app.fork(wid, END + 2, allow_reexecute=True)

    refused = cli(agent.url, "fork", wid, "--from", "1", cwd=agent.workdir)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "in doubt" in refused.stderr
    past = cli(agent.url, "fork", wid, "--from", str(END + 2), cwd=agent.workdir)
    assert past.returncode == 1, (past.stdout, past.stderr)
    store, line = past.stderr.splitlines()  # the store it read, then one error line
    assert store.startswith("store: ")
    assert line.startswith("error: ") and f"from_seq={END + 2}" in line
    assert len(downstream.calls()) == 1  # no fork ran pay again
    assert agent.counts(wid) == {"quote": 1, "pay": 1}
