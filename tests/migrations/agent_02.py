"""The agent of the 0.2-written store fixture, written against what release 0.2 and this release
both have, so either can serve its runs.

Run by release 0.2's interpreter (the virtualenv ``release_02.py`` builds), it is also the 0.2
side of the tests:

- ``python agent_02.py write URL OUT.json``: creates a store at ``URL`` holding runs in every
  state a deploy meets (completed, failed, suspended on an event, on a timer, on an approval, a
  parent waiting on its child, pending), schedules and shared values, and writes to
  ``OUT.json`` what release 0.2 reads of it (the expectations of ``test_store_upgrade.py``).
- ``python agent_02.py serve URL STOP``: a 0.2 worker serving the store until the file ``STOP``
  exists (a rolling deploy: the store is upgraded under it).
- ``python agent_02.py run URL ID``: a new run, executed in process by 0.2's ``app.run``; prints
  its result as JSON.

This release imports :func:`declare` to register the same workflows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import stalwart
from stalwart import testing

TIMER_SECONDS = 8.0  # the timer run's sleep: due a few seconds after the store is written
SHARED_KEYS = ("plan", "notes")
SCHEDULE = "nightly"
# Each run's id, its workflow, its argument, and the status the writer leaves it in.
RUNS: dict[str, tuple[str, int, str]] = {
    "done-1": ("finished", 3, "completed"),
    "done-shared": ("note", 4, "completed"),
    "failed-1": ("broken", 5, "failed"),
    "wait-event-1": ("on_event", 10, "suspended"),
    "wait-timer-1": ("on_timer", 20, "suspended"),
    "wait-approval-1": ("on_approval", 30, "suspended"),
    "parent-1": ("parent", 40, "suspended"),
}
PENDING = ("pending-1", "later", 7)


def declare(app: stalwart.Stalwart) -> dict[str, Any]:
    """Register the fixture's steps and workflows on ``app``; its workflows by name."""

    @app.step(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.step(name="boom", retry=stalwart.Retry(max_attempts=1))
    def boom(x: int) -> int:
        raise ValueError(f"boom {x}")

    @app.workflow(name="finished")
    def finished(x: int) -> dict[str, int]:
        return {"sum": add(x, 1), "twice": add(x, x)}

    @app.workflow(name="note")
    def note(x: int) -> int:
        written = stalwart.shared_set("notes", {"from": stalwart.workflow_id(), "x": add(x, 0)})
        assert written is not None
        return written.version

    @app.workflow(name="broken")
    def broken(x: int) -> int:
        return boom(add(x, 0))

    @app.workflow(name="on_event")
    def on_event(x: int) -> list[Any]:
        first = add(x, 1)
        payload = stalwart.wait_for_event("go")
        return [first, payload, add(first, payload["n"])]

    @app.workflow(name="on_timer")
    def on_timer(x: int) -> int:
        first = add(x, 1)
        stalwart.sleep(TIMER_SECONDS)
        return add(first, 100)

    @app.workflow(name="on_approval")
    def on_approval(x: int) -> list[Any]:
        first = add(x, 1)
        decision = stalwart.request_approval("ship the order", details={"x": x})
        assert decision is not None
        return [first, decision.approved, decision.by, decision.reason]

    @app.workflow(name="parent")
    def parent(x: int) -> list[Any]:
        child = stalwart.start_child(on_event, add(x, 1))
        return ["parent", child.workflow_id, child.result()]

    @app.workflow(name="later")
    def later(x: int) -> int:
        return add(x, 2)

    return {
        wf.__name__: wf
        for wf in (finished, note, broken, on_event, on_timer, on_approval, parent, later)
    }


def child_of(app: stalwart.Stalwart, parent_id: str) -> str:
    """The id of the one child run ``parent_id`` started."""
    (child,) = [info.workflow_id for info in app.list_workflows() if info.parent_id == parent_id]
    return child


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it: dataclasses as dicts, times in ISO form."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def outcome(app: stalwart.Stalwart, workflow_id: str) -> dict[str, Any]:
    """A terminal run's result, or its error's type and message."""
    try:
        return {"result": _plain(app.handle(workflow_id).result(timeout=0))}
    except stalwart.StalwartError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def reads(app: stalwart.Stalwart) -> dict[str, Any]:
    """What an app reads of the fixture's store: every run, its journal and outcome, the
    approvals, schedules and shared values."""
    runs = {info.workflow_id: _plain(info) for info in app.list_workflows(limit=1000)}
    return {
        "runs": runs,
        "journals": {wid: _plain(app.journal(wid)) for wid in sorted(runs)},
        "outcomes": {
            wid: outcome(app, wid)
            for wid, info in sorted(runs.items())
            if info["status"] in ("completed", "failed")
        },
        "approvals": _plain(app.approvals(pending=False)),
        "schedules": _plain(app.schedules()),
        "shared": {key: _plain(app.shared_get(key)) for key in SHARED_KEYS},
        "shared_history": {key: _plain(app.shared_history(key)) for key in SHARED_KEYS},
    }


def serve_until(app: stalwart.Stalwart, done: Any, timeout: float = 60.0, *, say: str = "") -> None:
    """Serve ``app`` with a worker in a thread until ``done()`` holds, then stop it (once the
    worker is started, print ``say`` if given)."""
    worker = testing.worker(app, concurrency=4)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    if say:
        print(say, flush=True)
    deadline = time.monotonic() + timeout
    try:
        while not done():
            if time.monotonic() > deadline:
                statuses = {i.workflow_id: i.status for i in app.list_workflows()}
                raise TimeoutError(f"the runs did not get where they should: {statuses}")
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(timeout=30)


def write(url: str, out: Path) -> None:
    """Create the fixture store at ``url`` and write what this code reads of it to ``out``."""
    with stalwart.Stalwart(url) as app:
        workflows = declare(app)
        app.shared_set("plan", {"steps": ["draft", "review"]}, by="fixture")
        app.shared_set("plan", {"steps": ["draft", "review", "ship"]}, by="fixture")
        app.schedule(workflows["later"], "0 3 1 1 *", name=SCHEDULE, args=(1,), catch_up="none")
        for workflow_id, (name, arg, _) in RUNS.items():
            app.start(workflows[name], arg, workflow_id=workflow_id)

        def settled() -> bool:
            statuses = {i.workflow_id: i.status for i in app.list_workflows()}
            children = [i for i in app.list_workflows() if i.parent_id == "parent-1"]
            return all(statuses.get(wid) == want for wid, (_, _, want) in RUNS.items()) and [
                c.status for c in children
            ] == ["suspended"]

        serve_until(app, settled)
        pending_id, name, arg = PENDING
        app.start(workflows[name], arg, workflow_id=pending_id)
        out.write_text(json.dumps(reads(app), indent=1, sort_keys=True) + "\n")


def serve(url: str, stop: Path) -> None:
    """Serve the store at ``url`` with a worker until the file ``stop`` exists (``serving``
    on stdout once the worker is started)."""
    with stalwart.Stalwart(url) as app:
        declare(app)
        serve_until(app, stop.exists, timeout=120.0, say="serving")


def run(url: str, workflow_id: str) -> None:
    """Run a new run of ``finished`` in this process with ``app.run``; print its result."""
    with stalwart.Stalwart(url) as app:
        workflows = declare(app)
        print(json.dumps(app.run(workflows["finished"], 11, workflow_id=workflow_id)))


if __name__ == "__main__":
    mode, target, argument = sys.argv[1:4]
    if mode == "write":
        write(target, Path(argument))
    elif mode == "serve":
        serve(target, Path(argument))
    elif mode == "run":
        run(target, argument)
    else:
        raise SystemExit(f"error: {mode!r}: use write URL OUT.json, serve URL STOP, run URL ID")
