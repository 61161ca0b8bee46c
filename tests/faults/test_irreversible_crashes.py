"""SIGKILL inside an irreversible step, right after its effect happened downstream.

The ``pay_verified`` and ``pay_unverified`` scenarios of ``crash_agent.py`` run ``quote``, then
the irreversible ``pay`` (a charge in ``worker_agent.Downstream``, a SQLite file that logs every
call it receives), then ``receipt``. ``pay`` charges, then creates its marker and sleeps; the test
SIGKILLs the process there: the charge is made, the journal only says ``scheduled``.

* with ``verify`` (which looks the charge up downstream by ``stalwart.idempotency_key()``), the
  restarted run records what verify found and completes; downstream received ONE call, ever;
* without ``verify``, the restarted run stops in ``needs_attention`` without calling downstream
  again, with a reason that names the step, its arguments and its idempotency key; an operator's
  ``app.resolve`` (or ``stalwart resolve ... --result JSON``) settles it and the run completes with
  the operator's result.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fault_harness import NEEDS_ATTENTION_EXIT, Harness, cli, completed_twice, step_entries
from worker_agent import Downstream

import stalwart

pytestmark = pytest.mark.timeout(60)

SEED = 7  # crash_agent's default --seed: the order is "o-7" of 700, and quote adds a fee of 5
ORDER, TOTAL = f"o-{SEED}", SEED * 100 + 5


def pay_key(workflow_id: str) -> str:
    """The idempotency key of ``pay``: the run id and its position (``quote`` is position 0)."""
    return f"{workflow_id}/1"


def killed_after_the_charge(agent: Harness, scenario: str, workflow_id: str) -> tuple[str, int]:
    """Run ``scenario`` and SIGKILL it inside ``pay`` after the charge; ``(charge_id, pid)``."""
    agent.crash(scenario, workflow_id, at=["pay"])
    downstream = Downstream(agent.workdir / "downstream.db")
    charges = downstream.charges()
    assert charges == [(pay_key(workflow_id), charges[0][1], ORDER, TOTAL)], charges
    [pay] = [e for e in agent.executions(workflow_id) if e["step"] == "pay"]
    assert downstream.calls() == [(pay_key(workflow_id), ORDER, TOTAL, pay["pid"])]
    with agent.app() as app:
        assert app.handle(workflow_id).status() == "running"  # the journal does not know...
        entries = step_entries(app, workflow_id, "pay")
        assert [(e.status, e.attempt) for e in entries] == [("scheduled", 1)]  # ...it is in doubt
    return str(charges[0][1]), int(pay["pid"])


def test_verify_settles_an_attempt_killed_after_its_effect(agent: Harness) -> None:
    wid = "pay-verified-1"
    downstream = Downstream(agent.workdir / "downstream.db")
    charge_id, pid = killed_after_the_charge(agent, "pay_verified", wid)

    second = agent.run("pay_verified", wid)
    assert second.returncode == 0, second.describe()
    expected = {"charge": charge_id, "receipt": f"receipt-for-{charge_id}"}
    assert second.outcome["result"] == expected

    # Downstream saw exactly one call, ever: verify read it, nothing charged again.
    key = pay_key(wid)
    assert downstream.calls() == [(key, ORDER, TOTAL, pid)]
    assert downstream.charges() == [(key, charge_id, ORDER, TOTAL)]
    assert agent.counts(wid) == {"quote": 1, "pay": 1, "verify_pay": 1, "receipt": 1}
    [check] = [e for e in agent.executions(wid) if e["step"] == "verify_pay"]
    assert check["key"] == key  # verify sees the key the step used
    assert check["pid"] != pid  # it ran in the restarted process

    with agent.app() as app:
        assert app.handle(wid).status() == "completed"
        entries = step_entries(app, wid, "pay")
        assert [(e.status, e.attempt) for e in entries] == [
            ("scheduled", 1),
            ("in_doubt", 1),
            ("completed", 1),
        ]
        assert (entries[2].output, entries[2].by) == (charge_id, "verify")
        assert completed_twice(app, wid) == []

    third = agent.run("pay_verified", wid)  # a terminal run: nothing runs, nothing is called
    assert third.returncode == 0, third.describe()
    assert third.outcome["result"] == expected
    assert len(downstream.calls()) == 1
    assert agent.counts(wid) == {"quote": 1, "pay": 1, "verify_pay": 1, "receipt": 1}


def needs_attention_in_this_process(app: stalwart.Stalwart, workflow_id: str) -> Any:
    """``app.run`` of the run in the test process: it must raise rather than execute."""

    @app.workflow(name="pay_agent")
    def pay_agent(order_id: str, amount: int) -> dict[str, Any]:
        raise AssertionError("a run that needs attention must not execute")

    with pytest.raises(stalwart.NeedsAttention) as info:
        app.run(pay_agent, ORDER, SEED * 100, workflow_id=workflow_id)
    return info.value


@pytest.mark.parametrize("via", ["api", "cli"])
def test_without_verify_an_attempt_killed_after_its_effect_waits_for_resolve(
    agent: Harness, via: str
) -> None:
    wid = f"pay-unverified-{via}"
    downstream = Downstream(agent.workdir / "downstream.db")
    charge_id, pid = killed_after_the_charge(agent, "pay_unverified", wid)
    key = pay_key(wid)

    second = agent.run("pay_unverified", wid)
    assert second.returncode == NEEDS_ATTENTION_EXIT, second.describe()
    outcome = second.outcome
    assert outcome["workflow_id"] == wid
    reason = outcome["reason"]
    assert "'pay'" in reason, reason  # the step,
    assert f"({ORDER!r}, {TOTAL})" in reason, reason  # its arguments,
    assert repr(key) in reason, reason  # and its idempotency key
    # The step did not run again: downstream still saw one call.
    assert downstream.calls() == [(key, ORDER, TOTAL, pid)]
    assert agent.counts(wid) == {"quote": 1, "pay": 1}

    with agent.app() as app:
        assert app.handle(wid).status() == "needs_attention"
        assert [w.workflow_id for w in app.list_workflows(status="needs_attention")] == [wid]
        entries = step_entries(app, wid, "pay")
        assert [(e.status, e.attempt) for e in entries] == [("scheduled", 1), ("in_doubt", 1)]
        seq = entries[-1].seq
        assert isinstance(seq, int)
        assert f"seq {seq}" in reason, reason
        again = needs_attention_in_this_process(app, wid)
        assert again.workflow_id == wid
        assert again.reason == reason
        with pytest.raises(ValueError, match="resolve"):
            app.retry(wid)  # an in-doubt step is settled by resolve, not retried

        # The operator checks downstream, finds the charge and records it as what happened.
        if via == "api":
            app.resolve(wid, seq, result=charge_id, by="finance")
        else:
            refused = cli(agent.url, "retry", wid, cwd=agent.workdir)
            assert refused.returncode == 1, (refused.stdout, refused.stderr)
            assert "resolve" in refused.stderr
            done = cli(
                agent.url,
                *("resolve", wid, str(seq), "--result", json.dumps(charge_id), "--by", "finance"),
                cwd=agent.workdir,
            )
            assert done.returncode == 0, (done.stdout, done.stderr)
            assert f"resolved {wid} seq {seq}" in done.stdout
        assert app.handle(wid).status() == "pending"

    third = agent.run("pay_unverified", wid)
    assert third.returncode == 0, third.describe()
    assert third.outcome["result"] == {"charge": charge_id, "receipt": f"receipt-for-{charge_id}"}
    assert downstream.calls() == [(key, ORDER, TOTAL, pid)]  # still one call, ever
    assert agent.counts(wid) == {"quote": 1, "pay": 1, "receipt": 1}

    with agent.app() as app:
        assert app.handle(wid).status() == "completed"
        entries = step_entries(app, wid, "pay")
        assert [e.status for e in entries] == ["scheduled", "in_doubt", "completed"]
        assert (entries[-1].output, entries[-1].by) == (charge_id, "finance")
        ops = [(e.name, e.by) for e in app.journal(wid) if e.kind == "operator"]
        assert ops == [("resolve", "finance")]
        assert completed_twice(app, wid) == []
