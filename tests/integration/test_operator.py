"""Operator actions on every backend: dead-letter redrive (retry)."""

from __future__ import annotations

from collections import Counter

import pytest

import stalwart


def test_a_failed_run_is_redriven_from_its_failed_step(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()
    broken = {"on": True}

    @app.step(name="fetch")
    def fetch() -> int:
        calls["fetch"] += 1
        return 1

    @app.step(name="charge", retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def charge(x: int) -> int:
        calls["charge"] += 1
        if broken["on"]:
            raise ConnectionError("provider down")
        return x + 1

    @app.workflow(name="agent")
    def agent() -> int:
        return charge(fetch())

    with pytest.raises(stalwart.WorkflowFailed, match="provider down"):
        app.run(agent, workflow_id="r1")
    failed = app.list_workflows(status="failed")
    assert [f.workflow_id for f in failed] == ["r1"] and "ConnectionError" in (
        failed[0].error or ""
    )
    broken["on"] = False  # the cause was fixed
    app.retry("r1", by="oncall")
    assert app.handle("r1").status() == "pending"
    assert app.run(agent, workflow_id="r1") == 2
    assert calls == Counter({"fetch": 1, "charge": 3})
    attempts = [(e.attempt, e.status) for e in app.journal("r1") if e.name == "charge"]
    assert attempts == [(1, "failed"), (2, "failed"), (0, "failed"), (1, "completed")]
    ops = [(e.name, e.by) for e in app.journal("r1") if e.kind == "operator"]
    assert ops == [("retry", "oncall")]


def test_retry_refuses_runs_that_did_not_fail(app: stalwart.Stalwart) -> None:
    @app.workflow(name="ok")
    def ok() -> int:
        return 1

    app.run(ok, workflow_id="fine")
    with pytest.raises(ValueError, match="only failed and needs_attention"):
        app.retry("fine")
    with pytest.raises(stalwart.WorkflowNotFound):
        app.retry("nope")


def test_a_divergence_is_retried_after_the_fix(app: stalwart.Stalwart) -> None:
    version = {"v": 1}

    @app.step(name="a")
    def a() -> str:
        return "a"

    @app.step(name="b")
    def b() -> str:
        return "b"

    @app.step(name="halt")
    def halt() -> None:
        if version["v"] == 1:
            raise KeyboardInterrupt

    @app.workflow(name="w")
    def w() -> str:
        first = (a if version["v"] != 2 else b)()
        halt()
        return first

    with pytest.raises(KeyboardInterrupt):
        app.run(w, workflow_id="d")
    version["v"] = 2  # a bad deploy
    with pytest.raises(stalwart.NeedsAttention):
        app.run(w, workflow_id="d")
    version["v"] = 3  # the fix
    app.retry("d")
    assert app.run(w, workflow_id="d") == "a"
