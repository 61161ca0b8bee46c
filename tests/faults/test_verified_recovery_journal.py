"""After a recovery settled by ``verify``, the journal tells what happened.

``crash_agent.py pay_verified`` runs ``quote``, the irreversible ``pay`` (a charge downstream,
then a hang where the test SIGKILLs the process) and ``receipt``. On recovery ``verify`` finds
the charge, so ``pay`` is not run again. The journal must show the interrupted attempt on ``pay``
(not on ``receipt``, which never ran before the crash), and a completion whose ``by`` is
``"verify"``; ``receipt`` runs once, as its attempt 1.
"""

from __future__ import annotations

import pytest
from fault_harness import Harness, completed_twice, step_entries
from worker_agent import Downstream

pytestmark = pytest.mark.timeout(60)


def test_the_interrupted_attempt_is_charged_to_the_step_verify_settled(agent: Harness) -> None:
    wid = "verified-journal"
    downstream = Downstream(agent.workdir / "downstream.db")
    agent.crash("pay_verified", wid, at=["pay"])
    assert len(downstream.calls()) == 1

    resumed = agent.run("pay_verified", wid)
    assert resumed.returncode == 0, resumed.describe()
    assert len(downstream.calls()) == 1  # verify found the charge: no second POST
    assert agent.counts(wid) == {"quote": 1, "pay": 1, "verify_pay": 1, "receipt": 1}
    [receipt_run] = [e for e in agent.executions(wid) if e["step"] == "receipt"]
    assert receipt_run["attempt"] == 1

    with agent.app() as app:
        pay = step_entries(app, wid, "pay")
        assert [(e.status, e.attempt) for e in pay] == [
            ("scheduled", 1),
            ("in_doubt", 1),  # the interrupted attempt, on the step it interrupted
            ("completed", 1),
        ]
        assert pay[1].error is not None and "interrupted" in pay[1].error
        assert pay[1].by is None
        assert (pay[2].by, pay[2].output) == ("verify", downstream.charges()[0][1])
        receipt = step_entries(app, wid, "receipt")
        assert [(e.status, e.attempt, e.by) for e in receipt] == [("completed", 1, None)]
        charged = [e.name for e in app.journal(wid) if e.error and "interrupted" in e.error]
        assert charged == ["pay"]
        assert completed_twice(app, wid) == []
