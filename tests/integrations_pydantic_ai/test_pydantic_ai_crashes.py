"""pydantic-ai agents made durable by ``StalwartDurability`` survive a real SIGKILL of their
worker: a new worker resumes the agent loop without repeating a completed model call or tool,
an irreversible tool with ``verify`` is not repeated, and an approval waits across a restart.

The agents and their side files are in ``pydantic_ai_worker.py``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fault_harness import WorkerHarness, completed_twice, step_entries
from pydantic_ai_worker import APPROVAL_WORKFLOW, HANG_ENV, RESEARCH_WORKFLOW, Ledger

import stalwart

WORKER = Path(__file__).with_name("pydantic_ai_worker.py")
RESULT = "notes on durable agents | ch-o-1-1"
CALLS = {"model-1": 1, "lookup": 1, "model-2": 1, "charge": 1, "model-3": 1}
CHARGE_STEP = "researcher__function_toolset__<agent>.call_tool:charge"


def _worker(workers: WorkerHarness, *hang: str) -> subprocess.Popen[bytes]:
    return workers.start(program=WORKER, env={HANG_ENV: ",".join(hang)}, concurrency=4)


def _kill_in(workers: WorkerHarness, step: str, workflow_id: str) -> None:
    """Start a worker that hangs in ``step``; SIGKILL it once ``step`` is running."""
    doomed = _worker(workers, step)
    marker = workers.marker(workflow_id, step)
    workers.wait_for(marker.exists, f"{step} running", 60, [doomed])
    workers.kill(doomed)


@pytest.mark.parametrize("step", ["lookup", "model-2"])
def test_a_killed_agent_resumes_without_repeating_completed_model_calls_or_tools(
    agent_workers: WorkerHarness, agent_app: stalwart.Stalwart, step: str
) -> None:
    wid = f"research-{step}"
    agent_app.start(RESEARCH_WORKFLOW, "durable agents", workflow_id=wid)
    _kill_in(agent_workers, step, wid)
    _worker(agent_workers)

    assert agent_app.handle(wid).result(timeout=60) == RESULT
    assert agent_workers.counts(wid) == {**CALLS, step: 2}  # only the interrupted one again
    assert completed_twice(agent_app, wid) == []
    failed = [e for e in agent_app.journal(wid) if e.kind == "step" and e.status == "failed"]
    assert [e.error.split(":")[0] for e in failed if e.error] == ["AttemptInterrupted"]
    assert len(Ledger(agent_workers.workdir).charges()) == 1
    # The killed model request's tokens are lost: the run's totals are a lower bound then.
    assert agent_app.usage(wid).partial == (step == "model-2")


def test_an_irreversible_tool_with_verify_is_not_repeated_after_a_kill(
    agent_workers: WorkerHarness, agent_app: stalwart.Stalwart
) -> None:
    """Killed after the charge took effect, before its step was recorded: the new worker asks
    ``verify``, which finds the charge by the step's idempotency key, so the tool does not run
    again and the agent goes on with the charge id."""
    wid = "research-charge"
    agent_app.start(RESEARCH_WORKFLOW, "durable agents", workflow_id=wid)
    _kill_in(agent_workers, "charge", wid)
    _worker(agent_workers)

    assert agent_app.handle(wid).result(timeout=60) == RESULT
    assert agent_workers.counts(wid) == CALLS  # the charge ran once
    charges = Ledger(agent_workers.workdir).charges()
    assert [c["charge_id"] for c in charges] == ["ch-o-1-1"]
    entries = step_entries(agent_app, wid, CHARGE_STEP)
    assert [(e.status, e.by) for e in entries] == [
        ("scheduled", None),
        ("in_doubt", None),
        ("completed", "verify"),
    ]
    assert entries[-1].idempotency_key == charges[0]["key"]
    assert completed_twice(agent_app, wid) == []


def test_an_approval_tool_waits_durably_across_a_restart(
    agent_workers: WorkerHarness, agent_app: stalwart.Stalwart
) -> None:
    """The refund needs a person's approval: the run waits holding nothing, its worker is
    killed, a new one starts, the approval arrives through ``app.approve``, and the refund runs
    once."""
    first = _worker(agent_workers)
    wid = "refund-1"
    agent_app.start(APPROVAL_WORKFLOW, "o-7", workflow_id=wid)
    handle = agent_app.handle(wid)
    agent_workers.wait_for(lambda: handle.status() == "suspended", "the run waits", 60, [first])
    (pending,) = agent_app.approvals()
    assert (pending.workflow_id, pending.subject) == (wid, "refunds: refund")
    assert pending.details["args"] == {"order": "o-7"}
    assert agent_app.describe(wid).waiting_for == "approval refunds: refund"
    agent_workers.kill(first)

    _worker(agent_workers)
    agent_app.approve(wid, by="alice", reason="the parcel never came")

    assert handle.result(timeout=60) == "refunded o-7"
    assert agent_workers.counts(wid) == {"model-1": 1, "refund": 1, "model-2": 1}
    (decided,) = agent_app.approvals(pending=False)
    assert decided.decision is not None and decided.decision.by == "alice"
