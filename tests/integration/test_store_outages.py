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
    """The store fails once, when the first step result is journaled: by ``append``, or by
    ``finish_run`` when the run ends right after the step and takes the result along."""
    store = store_of(app)
    real_append, real_finish = store.append, store.finish_run
    failures = [1]

    def fail_once(entries: Any) -> None:
        if failures and any(e.kind == "step" and e.status == "completed" for e in entries):
            failures.pop()
            raise stalwart.StoreError("sqlite:///runs.db: disk I/O error")

    def flaky_append(workflow_id: str, entry: Any, *, owner: str | None) -> bool:
        fail_once([entry])
        return real_append(workflow_id, entry, owner=owner)

    def flaky_finish(workflow_id: str, **kwargs: Any) -> bool:
        fail_once(kwargs.get("charged", ()))
        return real_finish(workflow_id, **kwargs)

    monkeypatch.setattr(store, "append", flaky_append)
    monkeypatch.setattr(store, "finish_run", flaky_finish)


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
