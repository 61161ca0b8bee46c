"""An exception in the engine's own bookkeeping is never a worker crash or a silent hang.

The run goes to ``needs_attention`` with reason type ``EngineError`` (``retry`` tries again);
an invocation that cannot even record that gives its lease back and logs an ERROR naming the
run. The faults are injected by replacing one store verb, the only way to make stalwart's
own code fail on purpose.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import stalwart
from stalwart.testing import store_of


def _flaky(target: Any, verb: str, times: int) -> list[int]:
    """Make ``target.verb`` raise ``RuntimeError`` on its first ``times`` calls."""
    real = getattr(target, verb)
    calls = [0]

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= times:
            raise RuntimeError(f"{verb} is broken")
        return real(*args, **kwargs)

    setattr(target, verb, broken)
    return calls


def test_a_bookkeeping_error_inside_workflow_code_needs_attention(app: stalwart.Stalwart) -> None:
    ran = []

    @app.step
    def work() -> str:
        ran.append(1)
        return "done"

    @app.workflow
    def wf() -> str:
        first = work()
        stalwart.wait_for_event("go", timeout=0)
        return first

    _flaky(store_of(app), "open_wait", times=1)
    with pytest.raises(stalwart.NeedsAttention, match="EngineError|bookkeeping"):
        app.run(wf, workflow_id="e1")
    row = store_of(app).get_run("e1")
    assert row is not None and row.status == "needs_attention"
    assert json.loads(row.error or "{}")["type"] == "EngineError"
    assert row.lease_owner is None
    (info,) = app.list_workflows(status="needs_attention")
    assert info.error is not None and info.error.startswith("EngineError")

    app.retry("e1")
    assert app.run(wf, workflow_id="e1") == "done"
    assert ran == [1]  # the completed step was not run again


def test_a_bookkeeping_error_outside_workflow_code_needs_attention(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow
    def wf() -> str:
        stalwart.sleep(60)
        return "woke"

    _flaky(store_of(app), "suspend_run", times=1)
    with pytest.raises(stalwart.NeedsAttention):
        app.run(wf, workflow_id="e2")
    row = store_of(app).get_run("e2")
    assert row is not None and row.status == "needs_attention"
    assert json.loads(row.error or "{}")["type"] == "EngineError"
    kinds = [(e.kind, e.name) for e in app.journal("e2")]
    assert ("run", "needs_attention") in kinds


def test_an_invocation_that_records_no_outcome_releases_its_lease_and_says_so(
    app: stalwart.Stalwart, caplog: pytest.LogCaptureFixture
) -> None:
    @app.workflow
    def wf() -> str:
        return "ok"

    _flaky(store_of(app), "finish_run", times=10)
    with caplog.at_level(logging.ERROR, logger="stalwart"), pytest.raises(RuntimeError):
        app.run(wf, workflow_id="e3")
    row = store_of(app).get_run("e3")
    assert row is not None and row.status == "running"
    assert row.lease_owner is None, "the lease is given back, not left to lapse"
    assert any(
        r.levelno == logging.ERROR
        and "e3" in r.getMessage()
        and "lease was released" in r.getMessage()
        for r in caplog.records
    ), caplog.text
    _flaky(store_of(app), "finish_run", times=0)
