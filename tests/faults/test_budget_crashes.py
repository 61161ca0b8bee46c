"""A run under a budget, SIGKILLed mid-run, stopped (by its budget, or by a failure) and
retried with a larger budget: its spend counts what it spent before the crash and the retry
(no reset, no double count), the larger limit applies, and the run goes on from where it
stopped. The agents are ``crash_agent.py``'s ``budget_tokens`` and ``budget_steps``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from crash_agent import Recorder, budget_steps_scenario, budget_tokens_scenario
from fault_harness import FAILED_EXIT, NEEDS_ATTENTION_EXIT, Harness

import stalwart


@contextmanager
def _declaring(agent: Harness, scenario: str) -> Iterator[stalwart.Stalwart]:
    """An app in the test process that declares the scenario's workflow (a retry with a
    budget is given by an app that declares it)."""
    scenarios = {"budget_tokens": budget_tokens_scenario, "budget_steps": budget_steps_scenario}
    with stalwart.Stalwart(agent.url) as app:
        scenarios[scenario](app, Recorder(agent.workdir, []), argparse.Namespace(seed=7))
        yield app


def test_tokens_spent_before_a_crash_count_after_a_retry_with_a_larger_budget(
    agent: Harness,
) -> None:
    wid = "tokens-1"
    agent.crash("budget_tokens", wid, at=["think3"])  # think1 and think2 spent 60 tokens
    stopped = agent.run("budget_tokens", wid)
    assert stopped.returncode == NEEDS_ATTENTION_EXIT, stopped.describe()
    # think3 ran again after the crash (its killed attempt recorded no usage), then think4:
    # 120 tokens, so think5 never started.
    assert "max_tokens=100 (used 120)" in stopped.outcome["reason"], stopped.outcome
    assert "think5" not in agent.counts(wid)
    with _declaring(agent, "budget_tokens") as app:
        # partial: the killed attempt of think3, a step that records usage, may have used some
        assert app.usage(wid) == stalwart.Usage(input_tokens=120, attempts=5, partial=True)
        with pytest.raises(stalwart.InvalidOperation, match="raises a limit"):
            app.retry(wid, budget=stalwart.Budget(max_tokens=100))
        app.retry(wid, budget=stalwart.Budget(max_tokens=130), by="ops")
    # Killed again, in think5: the larger budget is the journal's, so the next process still
    # has it (under the declared 100, the 120 tokens spent would stop the run again).
    agent.crash("budget_tokens", wid, at=["think5"])
    done = agent.run("budget_tokens", wid)
    assert done.outcome == {
        "status": "completed",
        "result": 7 + 15,
        "elapsed": pytest.approx(done.outcome["elapsed"]),
    }, done.describe()
    assert agent.counts(wid) == {"think1": 1, "think2": 1, "think3": 2, "think4": 1, "think5": 2}
    with agent.app() as app:
        # every token once: five finished attempts of 30, and the two killed ones, each
        # counted as an attempt with no usage recorded
        assert app.usage(wid) == stalwart.Usage(input_tokens=150, attempts=7, partial=True)


def test_a_run_failed_after_a_crash_retried_with_one_more_step_takes_it(
    agent: Harness,
) -> None:
    wid = "steps-1"
    agent.crash("budget_steps", wid, at=["second"])  # first: 1 step; second's attempt killed
    (agent.workdir / "fail-second").touch()
    failed = agent.run("budget_steps", wid)  # second: the killed attempt, then one failing
    assert failed.returncode == FAILED_EXIT, failed.describe()
    with _declaring(agent, "budget_steps") as app:
        assert app.usage(wid).attempts == 3  # first, second's killed attempt, its failure
        (agent.workdir / "fail-second").unlink()
        app.retry(wid, budget=stalwart.Budget(max_steps=4))  # room for one more attempt
    done = agent.run("budget_steps", wid)
    assert done.returncode == 0, done.describe()
    assert done.outcome["result"] == (7 + 1) * 2
    assert agent.counts(wid) == {"first": 1, "second": 3}
    with agent.app() as app:
        assert app.usage(wid).attempts == 4  # the retry itself is not an attempt
