"""A step's boundary: the run is checked (and the outcomes it went on past are journaled)
once before a new call's first attempt, and again before each retry."""

from __future__ import annotations

import pytest

import stalwart
from stalwart._engine.invocation import Invocation


def test_a_new_call_is_checked_once_and_a_retry_again(
    app: stalwart.Stalwart, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[str] = []
    check_alive = Invocation.check_alive

    def counted(inv: Invocation) -> None:
        checks.append(inv.workflow_id)
        check_alive(inv)

    monkeypatch.setattr(Invocation, "check_alive", counted)
    failures = {"flaky": 1}

    @app.step
    def plain() -> None:
        return None

    @app.step(retry=stalwart.Retry(max_attempts=2, initial_delay=0.0, jitter=False))
    def flaky() -> str:
        if failures["flaky"]:
            failures["flaky"] -= 1
            raise ConnectionError("try again")
        return "ok"

    @app.workflow
    def three() -> None:
        for _ in range(3):
            plain()

    @app.workflow
    def retried() -> str:
        return flaky()

    app.run(three, workflow_id="three")
    # one check a step, one as the workflow returns
    assert checks.count("three") == 4
    assert app.run(retried, workflow_id="retried") == "ok"
    # the call, its retry, the return
    assert checks.count("retried") == 3
    attempts = [(e.attempt, e.status) for e in app.journal("retried") if e.kind == "step"]
    assert attempts == [(1, "failed"), (2, "completed")]
