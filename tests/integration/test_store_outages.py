"""A store error in the middle of a run (a transient outage) ends the invocation, never the run.

The error reaches the caller of ``app.run``; the run is not failed, so running it again once the
store answers finishes it; and workflow code cannot catch the error and carry on as if the step
had failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart.testing import FakeClock, store_of

pytestmark = pytest.mark.timeout(30)


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def _fail_the_first_step_result(app: stalwart.Stalwart, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store fails once, when the first step result is journaled."""
    store = store_of(app)
    real_append = store.append
    failures = [1]

    def flaky_append(workflow_id: str, entry: Any, *, owner: str | None) -> bool:
        if entry.kind == "step" and entry.status == "completed" and failures:
            failures.pop()
            raise stalwart.StoreError("sqlite:///runs.db: disk I/O error")
        return real_append(workflow_id, entry, owner=owner)

    monkeypatch.setattr(store, "append", flaky_append)


def test_transient_store_error_does_not_dead_letter_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:
        _fail_the_first_step_result(app, monkeypatch)

        @app.step
        def work() -> str:
            return "ok"

        @app.workflow
        def wf() -> str:
            return work()

        with pytest.raises(stalwart.StoreError):
            app.run(wf, workflow_id="w")
        assert app.handle("w").status() != "failed"
        assert app.run(wf, workflow_id="w") == "ok"


def test_store_error_cannot_be_swallowed_by_workflow_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:
        _fail_the_first_step_result(app, monkeypatch)

        @app.step
        def charge() -> str:
            return "charged"

        @app.workflow
        def wf() -> str:
            try:
                return charge()
            except Exception:
                return "charge failed, refunded nothing"

        outcome: Any
        try:
            outcome = app.run(wf, workflow_id="w")
        except stalwart.StoreError:
            outcome = None
        assert outcome != "charge failed, refunded nothing"
