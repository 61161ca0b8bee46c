"""Review: journaling and replay defects (each test is a strict xfail that proves a bug)."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart.testing import FakeClock, runtime_of, store_of

pytestmark = pytest.mark.timeout(30)


class Crash(BaseException):
    """Stands in for kill -9 (as in docs/replay.md)."""


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'review.db'}"


def test_child_run_started_inside_a_step_journals_its_own_steps(tmp_path: Path) -> None:
    calls = Counter[str]()
    crash = True
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        def charge(order: str) -> str:
            calls["charge"] += 1
            return f"charged {order}"

        @app.step
        def ship(order: str) -> str:
            if crash:
                raise Crash()
            return f"shipped {order}"

        @app.workflow
        def fulfil(order: str) -> list[str]:
            return [charge(order), ship(order)]

        @app.step
        def spawn(order: str) -> Any:
            return app.run(fulfil, order, workflow_id=f"child-{order}")

        @app.workflow
        def parent(order: str) -> Any:
            return spawn(order)

        with pytest.raises(Crash):
            app.run(parent, "o1", workflow_id="parent-o1")
        crash = False
        assert app.run(fulfil, "o1", workflow_id="child-o1") == ["charged o1", "shipped o1"]
        # The child run is durable on its own: its completed step must not run twice.
        assert calls["charge"] == 1
        assert [e.name for e in app.journal("child-o1") if e.kind == "step"] != []


def test_same_app_takeover_does_not_record_a_step_twice(tmp_path: Path) -> None:
    """Regression test: at HEAD 09e4491 the owner was per app and this recorded two completions
    of one step; the per-claim owners in the working tree (Core.claim_owner) fix it."""
    clock = FakeClock()
    started = threading.Semaphore(0)
    release = {1: threading.Event(), 2: threading.Event()}
    reached_next = threading.Event()
    finish = threading.Event()
    with stalwart.Stalwart(_url(tmp_path), clock=clock) as app:

        @app.step
        def slow() -> str:
            attempt = stalwart.attempt()
            started.release()
            release[min(attempt, 2)].wait(5)
            return f"done by attempt {attempt}"

        @app.step
        def after(value: str) -> str:
            reached_next.set()
            finish.wait(5)
            return value

        @app.workflow
        def wf() -> str:
            return after(slow())

        results: list[Any] = []

        def runner() -> None:
            try:
                results.append(app.run(wf, workflow_id="w"))
            except BaseException as exc:  # report, do not hang the test
                results.append(exc)

        first = threading.Thread(target=runner)
        first.start()
        assert started.acquire(timeout=5)
        clock.advance(runtime_of(app).lease_seconds + 1)  # the lease lapsed (keeper stalled)
        second = threading.Thread(target=runner)
        second.start()
        assert started.acquire(timeout=2)  # the takeover runs attempt 2 (fine: lease lapsed)
        release[2].set()  # the new holder records attempt 2 ...
        assert reached_next.wait(5)
        release[1].set()  # ... then the stale invocation finishes attempt 1
        first.join(0.5)
        finish.set()
        first.join(5)
        second.join(5)
        completed = [
            (e.seq, e.attempt)
            for e in app.journal("w")
            if e.name.endswith("slow") and e.status == "completed"
        ]
        # The stale invocation must be fenced off: one completion per step, ever.
        assert len(completed) == 1, completed


def test_transient_store_error_does_not_dead_letter_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:
        store = store_of(app)
        real_append = store.append
        failures = [1]

        def flaky_append(workflow_id: str, entry: Any, *, owner: str | None) -> bool:
            if entry.kind == "step" and entry.status == "completed" and failures:
                failures.pop()
                raise stalwart.StoreError("sqlite:///review.db: disk I/O error")
            return real_append(workflow_id, entry, owner=owner)

        monkeypatch.setattr(store, "append", flaky_append)

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
        store = store_of(app)
        real_append = store.append
        failures = [1]

        def flaky_append(workflow_id: str, entry: Any, *, owner: str | None) -> bool:
            if entry.kind == "step" and entry.status == "completed" and failures:
                failures.pop()
                raise stalwart.StoreError("sqlite:///review.db: disk I/O error")
            return real_append(workflow_id, entry, owner=owner)

        monkeypatch.setattr(store, "append", flaky_append)

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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_run_of_async_workflow_inside_a_loop_does_not_fail_the_run(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        async def fetch() -> int:
            return 1

        @app.workflow
        async def wf() -> int:
            return await fetch()

        async def caller() -> tuple[type[BaseException], str] | None:
            try:
                app.run(wf, workflow_id="w")
            except BaseException as exc:  # keep no traceback: it pins the unawaited coroutine
                return type(exc), str(exc)
            return None

        outcome = asyncio.run(caller())
        gc.collect()  # the never-awaited coroutine is reported here, not in a later test
        assert outcome is not None
        assert issubclass(outcome[0], TypeError | RuntimeError), outcome
        assert "run_async" in outcome[1], outcome
        status = app.handle("w").status() if app.list_workflows() else None
        assert status != "failed"
