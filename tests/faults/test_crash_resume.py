"""SIGKILL a workflow's process in the middle of a step, rerun the same id in a new process.

Steps completed before the kill are replayed from the journal (never executed again), the
interrupted step executes once more, later steps execute once, and the result is the one an
uninterrupted run produces.
"""

from __future__ import annotations

import pytest
from fault_harness import Harness, step_entries

pytestmark = pytest.mark.timeout(60)

SYNC_STEPS = [f"s{i}" for i in range(1, 7)]
SEED = 7


def sync_expected(seed: int) -> dict[str, object]:
    value, trail = seed, []
    for i in range(1, 7):
        value = value * 3 + i
        trail.append(value)
    return {"value": value, "trail": trail}


def assert_interrupted_then_completed(entries: list, name: str) -> None:
    """The interrupted attempt is counted on recovery, then attempt 2 completes."""
    assert [(e.status, e.attempt) for e in entries] == [("failed", 1), ("completed", 2)], (
        name,
        entries,
    )
    assert entries[0].error is not None
    assert entries[0].error.startswith("AttemptInterrupted"), entries[0].error
    assert entries[0].seq == entries[1].seq  # one replay position, two attempts


@pytest.mark.parametrize("k", [1, 3, 6], ids=["first-step", "middle-step", "last-step"])
def test_sync_workflow_resumes_after_sigkill_in_step_k(agent: Harness, k: int) -> None:
    wid = f"sync-kill-s{k}"
    killed_step = f"s{k}"
    agent.crash("sync", wid, at=[killed_step])

    before_rerun = agent.counts(wid)
    assert before_rerun == dict.fromkeys(SYNC_STEPS[:k], 1), before_rerun

    rerun = agent.run("sync", wid)
    assert rerun.returncode == 0, rerun.describe()
    assert rerun.outcome["result"] == sync_expected(SEED)

    counts = agent.counts(wid)
    for i, step in enumerate(SYNC_STEPS, start=1):
        if i < k:
            assert counts[step] == 1, (step, counts)
        elif i == k:
            assert 1 <= counts[step] <= 2, (step, counts)
            assert counts[step] == 2, "the step was killed before its result was recorded"
        else:
            assert counts[step] == 1, (step, counts)

    with agent.app() as app:
        assert app.handle(wid).status() == "completed"
        assert app.handle(wid).result(timeout=5) == sync_expected(SEED)
        for step in SYNC_STEPS:
            entries = step_entries(app, wid, step)
            if step == killed_step:
                assert_interrupted_then_completed(entries, step)
            else:
                assert [(e.status, e.attempt) for e in entries] == [("completed", 1)], (
                    step,
                    entries,
                )


def test_sync_rerun_of_a_completed_run_executes_nothing(agent: Harness) -> None:
    wid = "sync-kill-then-done"
    agent.crash("sync", wid, at=["s4"])
    first = agent.run("sync", wid)
    assert first.returncode == 0, first.describe()
    executed = agent.counts(wid)

    again = agent.run("sync", wid)
    assert again.returncode == 0, again.describe()
    assert again.outcome["result"] == sync_expected(SEED)
    assert agent.counts(wid) == executed


ASYNC_STEPS = ["prep", "left", "right", "combine", "finish"]


@pytest.mark.parametrize(
    "killed",
    [["left", "right"], ["left"]],
    ids=["both-concurrent-steps-running", "one-concurrent-step-running"],
)
def test_async_gather_workflow_resumes_after_sigkill(agent: Harness, killed: list[str]) -> None:
    reference = agent.run("async", "async-reference")
    assert reference.returncode == 0, reference.describe()

    wid = "async-kill-" + "-".join(killed)
    if killed == ["left"]:
        # kill only once right's result is in the journal, while left is still running
        with agent.app() as app:
            agent.crash(
                "async",
                wid,
                at=killed,
                also=lambda: any(e.status == "completed" for e in step_entries(app, wid, "right")),
            )
        assert agent.counts(wid)["right"] == 1
    else:
        agent.crash("async", wid, at=killed)

    rerun = agent.run("async", wid)
    assert rerun.returncode == 0, rerun.describe()
    assert rerun.outcome["result"] == reference.outcome["result"]
    assert rerun.outcome["result"] == {"combined": "L16+R24", "x": 8}

    counts = agent.counts(wid)
    for step in ASYNC_STEPS:
        if step in killed:
            assert counts[step] == 2, (step, counts)  # killed mid-step: runs again, once
        else:
            assert counts[step] == 1, (step, counts)

    with agent.app() as app:
        assert app.handle(wid).status() == "completed"
        for step in ("prep", "combine", "finish"):
            entries = step_entries(app, wid, step)
            assert [(e.status, e.attempt) for e in entries] == [("completed", 1)], entries
        for step in ("left", "right"):
            entries = step_entries(app, wid, step)
            if step in killed:
                assert_interrupted_then_completed(entries, step)
            else:
                assert [(e.status, e.attempt) for e in entries] == [("completed", 1)], entries


def test_async_every_interrupted_concurrent_step_is_counted(agent: Harness) -> None:
    # Both steps of the gather were in flight when the process died: both attempts count.
    wid = "async-kill-both-counted"
    agent.crash("async", wid, at=["left", "right"])
    rerun = agent.run("async", wid)
    assert rerun.returncode == 0, rerun.describe()

    lines = agent.executions(wid)
    crashed_pid = lines[0]["pid"]  # prep ran in the killed process
    reexecuted = {
        line["step"]: line["attempt"]
        for line in lines
        if line["step"] in ("left", "right") and line["pid"] != crashed_pid
    }
    with agent.app() as app:
        for step in ("left", "right"):
            assert_interrupted_then_completed(step_entries(app, wid, step), step)
    assert reexecuted == {"left": 2, "right": 2}  # stalwart.attempt() counted across crashes


@pytest.mark.parametrize(
    ("scenario", "killed"),
    [("sync", "s3"), ("async", "right")],
    ids=["sync-step", "async-concurrent-step"],
)
def test_idempotency_key_survives_the_crash(agent: Harness, scenario: str, killed: str) -> None:
    wid = f"idem-{scenario}"
    crashed = agent.crash(scenario, wid, at=[killed])
    assert crashed.killed
    first = [line for line in agent.executions(wid) if line["step"] == killed]
    assert len(first) == 1

    rerun = agent.run(scenario, wid)
    assert rerun.returncode == 0, rerun.describe()
    lines = agent.executions(wid)
    runs_of_killed = [line for line in lines if line["step"] == killed]
    assert len(runs_of_killed) == 2
    killed_attempt, reexecution = runs_of_killed
    assert killed_attempt["pid"] != reexecution["pid"]  # really two processes
    assert killed_attempt["key"] == reexecution["key"]
    assert killed_attempt["key"].startswith(f"{wid}/")

    keys = {line["step"]: line["key"] for line in lines}
    assert len(set(keys.values())) == len(keys)  # unique per step call
