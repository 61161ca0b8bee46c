"""Every refused operator action raises ``InvalidOperation``, a ``UsageError`` (so a
``StalwartError`` and still a ``ValueError``); an id that is taken raises
``WorkflowAlreadyExists``."""

from __future__ import annotations

import pytest

import stalwart


def test_refused_operator_actions_are_invalid_operations(app: stalwart.Stalwart) -> None:
    @app.step
    def work() -> str:
        return "done"

    @app.workflow
    def wf() -> str:
        return work()

    @app.workflow
    def other() -> str:
        return "other"

    assert app.run(wf, workflow_id="done-1") == "done"
    refusals = [
        lambda: app.retry("done-1"),
        lambda: app.cancel("done-1"),
        lambda: app.approve("done-1"),
        lambda: app.reject("done-1"),
        lambda: app.resolve("done-1", 1, result="x"),
    ]
    for refuse in refusals:
        with pytest.raises(stalwart.InvalidOperation) as caught:
            refuse()
        assert isinstance(caught.value, stalwart.UsageError)
        assert isinstance(caught.value, stalwart.StalwartError)
        assert isinstance(caught.value, ValueError)
    with pytest.raises(stalwart.WorkflowAlreadyExists, match="done-1"):
        app.fork("done-1", 1, new_id="done-1")
    with pytest.raises(stalwart.WorkflowAlreadyExists, match="belongs to workflow"):
        app.run(other, workflow_id="done-1")
