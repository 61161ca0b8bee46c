"""The agent the portability tests move between stores: a run of each kind a store keeps
(completed with a big result and streams, suspended on an event, waiting on an approval, failed, one
with a workspace snapshot), a queue, a schedule and a shared key. ``stalwart worker
portable_worker:app`` serves it on ``$STALWART_URL``."""

from __future__ import annotations

from pathlib import Path

import stalwart


def declare(app: stalwart.Stalwart) -> None:
    """The agent's queue and workflows, on ``app``."""
    app.queue("llm", concurrency=2)

    @app.step
    def write(n: int) -> str:
        for i in range(3):
            stalwart.emit(f"part {i} ")
        stalwart.emit({"done": n}, stream="events")
        return " ".join(f"word{i}" for i in range(n))

    @app.step
    def keep(folder: str) -> stalwart.SnapshotRef:
        return stalwart.snapshot(folder)

    @app.step
    def boom() -> None:
        raise ValueError("no luck")

    @app.workflow(name="talk")
    def talk(n: int) -> str:
        stalwart.emit("thinking ")
        text = write(n)
        got = stalwart.wait_for_event("go")
        return f"{len(text)}:{got}"

    @app.workflow(name="done")
    def done(n: int) -> str:
        return write(n)

    @app.workflow(name="ask")
    def ask() -> str:
        decision = stalwart.request_approval("ship it?", details={"size": 3})
        return "approved" if decision and decision.approved else "rejected"

    @app.workflow(name="fails")
    def fails() -> None:
        boom()

    @app.workflow(name="snap")
    def snap(folder: str) -> int:
        return keep(folder).files


def seed(app: stalwart.Stalwart, folder: Path) -> None:
    """Runs of every kind, driven by a worker thread until each is where it stays."""
    from stalwart import testing

    (folder / "a.txt").write_text("alpha " * 1000)
    (folder / "sub").mkdir()
    (folder / "sub" / "b.bin").write_bytes(bytes(range(256)) * 64)
    app.shared_set("plan", {"steps": ["a", "b"]})
    app.shared_set("plan", {"steps": ["a", "b", "c"]})
    app.schedule("done", "@daily", name="nightly", args=(3,))
    handles = [
        app.start("done", 2000, workflow_id="done-1"),
        app.start("done", 5, workflow_id="done-2", queue="llm"),
        app.start("talk", 400, workflow_id="talk-1"),
        app.start("ask", workflow_id="ask-1"),
        app.start("fails", workflow_id="fails-1"),
        app.start("snap", str(folder), workflow_id="snap-1"),
    ]
    worker = testing.worker(app)
    import threading

    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        for handle in handles:
            _settled(app, handle.workflow_id)
    finally:
        worker.stop()
        thread.join(30)
    app.send_event("talk-1", "early-bird", {"not": "consumed"})


def _settled(app: stalwart.Stalwart, workflow_id: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if app.handle(workflow_id).status() in ("completed", "failed", "suspended"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{workflow_id} is {app.handle(workflow_id).status()}")
