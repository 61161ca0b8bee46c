"""``app.check()`` and ``stalwart check MODULE:APP``: the runs in flight replayed against the
code about to be deployed, executing nothing and writing nothing; and the worker's warning at
start about runs its app no longer registers.

Each version of the workflow is a module file; the runs are made under version 1 by a worker,
then checked by an app (or a ``stalwart`` subprocess) built from the next version."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import stalwart
from cli_process import stalwart as _stalwart
from stalwart import testing

_modules = itertools.count()

_STEPS = """
import collections, os
import stalwart

def build(url, calls):
    app = stalwart.Stalwart(url)

    @app.step(name="draft")
    def draft(topic: str) -> str:
        calls["draft"] += 1
        return f"draft of {topic}"

    @app.step(name="check_facts")
    def check_facts(text: str) -> str:
        calls["check_facts"] += 1
        return text + " (checked)"

    @app.step(name="publish")
    def publish(text: str) -> str:
        calls["publish"] += 1
        return f"published {text}"
"""
V1 = (
    _STEPS
    + """
    @app.workflow(name="writer")
    def writer(topic: str) -> str:
        text = draft(topic)
        stalwart.wait_for_event("review")
        done = publish(text)
        stalwart.wait_for_event("ship")
        return done

    return app, writer
"""
)
# Version 2 inserts a step between the review and the publication.
V2_INSERTS = (
    _STEPS
    + """
    @app.workflow(name="writer")
    def writer(topic: str) -> str:
        text = draft(topic)
        stalwart.wait_for_event("review")
        done = publish(check_facts(text))
        stalwart.wait_for_event("ship")
        return done

    return app, writer
"""
)
# Version 3 registers the workflow under a new name only: the old runs are stranded.
V3_RENAMES = V1.replace('name="writer"', 'name="writer_v2"')
AS_APP = "\napp, writer = build(os.environ['STALWART_URL'], collections.Counter())\n"


def _version(tmp_path: Path, source: str) -> Callable[..., Any]:
    name = f"deploy_check_v{next(_modules)}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build: Callable[..., Any] = module.build
    return build


@contextmanager
def _serving(app: stalwart.Stalwart) -> Iterator[None]:
    worker = testing.worker(app, concurrency=2)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(30)


def _until(app: stalwart.Stalwart, wid: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while app.handle(wid).status() != status:
        assert time.monotonic() < deadline, f"{wid} never became {status}"
        time.sleep(0.02)


def _fleet(tmp_path: Path, url: str, calls: Counter[str]) -> None:
    """Under version 1: ``early`` waits for its review (seqs 1-2), ``late`` has published and
    waits to ship (seqs 1-4), ``done`` completed, ``queued`` was never started by a worker."""
    app, writer = _version(tmp_path, V1)(url, calls)
    with app:
        with _serving(app):
            for wid in ("early", "late", "done"):
                app.start(writer, wid, workflow_id=wid)
            for wid in ("early", "late", "done"):
                _until(app, wid, "suspended")
            app.send_event("late", "review", "ok")
            app.send_event("done", "review", "ok")
            app.send_event("done", "ship", None)
            app.handle("done").result(timeout=30)
            _until(app, "late", "suspended")
            while [e.name for e in app.journal("late") if e.seq == 4] != ["ship"]:
                time.sleep(0.02)
        app.start(writer, "queued", workflow_id="queued")


def _snapshot(app: stalwart.Stalwart) -> list[list[Any]]:
    """Every row of the tables a run's replay could touch."""
    store = testing.store_of(app)
    return [
        testing.execute_sql(store, f"SELECT * FROM {table} ORDER BY 1, 2")
        for table in ("runs", "journal", "events", "approvals")
    ]


@pytest.fixture
def fleet(shared_url: str, tmp_path: Path) -> tuple[str, Counter[str]]:
    calls = Counter[str]()
    _fleet(tmp_path, shared_url, calls)
    assert calls == {"draft": 3, "publish": 2}
    return shared_url, calls


def test_a_deploy_that_inserts_a_step_reports_the_runs_and_seqs_that_diverge(
    fleet: tuple[str, Counter[str]], tmp_path: Path
) -> None:
    url, calls = fleet
    app, _writer = _version(tmp_path, V2_INSERTS)(url, calls)
    with app:
        before = _snapshot(app)
        results = app.check()
        assert results == [
            stalwart.CheckResult("early", True),  # not yet past the review: nothing differs
            stalwart.CheckResult("late", False, 3, "step publish", "step check_facts", "diverged"),
            stalwart.CheckResult("queued", True),
        ]
        assert app.check(["late", "done"]) == results[1:2]  # a terminal run is not listed
        assert _snapshot(app) == before  # no lease taken, nothing written
    assert calls == {"draft": 3, "publish": 2}  # and no step executed


def test_an_unchanged_deploy_reports_no_divergence(
    fleet: tuple[str, Counter[str]], tmp_path: Path
) -> None:
    url, calls = fleet
    app, _writer = _version(tmp_path, V1)(url, calls)
    with app:
        before = _snapshot(app)
        results = app.check()
        assert [(r.workflow_id, r.ok, r.reason) for r in results] == [
            ("early", True, None),
            ("late", True, None),
            ("queued", True, None),
        ]
        assert _snapshot(app) == before
    assert calls == {"draft": 3, "publish": 2}


def test_runs_of_a_workflow_no_longer_registered_are_stranded(
    fleet: tuple[str, Counter[str]], tmp_path: Path
) -> None:
    url, calls = fleet
    app, _writer = _version(tmp_path, V3_RENAMES)(url, calls)
    with app:
        assert app.check() == [
            stalwart.CheckResult(wid, False, None, "workflow writer", None, "stranded")
            for wid in ("early", "late", "queued")
        ]
        with pytest.raises(stalwart.WorkflowNotFound, match="nope"):
            app.check(["nope"])
        with pytest.raises(TypeError, match="list of workflow ids"):
            app.check("early")  # type: ignore[arg-type]


def test_a_record_that_cannot_be_decoded_is_corrupt(
    fleet: tuple[str, Counter[str]], tmp_path: Path
) -> None:
    url, calls = fleet
    app, _writer = _version(tmp_path, V1)(url, calls)
    with app:
        testing.execute_sql(
            testing.store_of(app),
            "UPDATE journal SET output = :v WHERE workflow_id = 'late' AND seq = 1",
            {"v": b"Xnot a payload"},
        )
        assert app.check(["late"]) == [
            stalwart.CheckResult("late", False, 1, "step draft", None, "corrupt")
        ]
    assert calls == {"draft": 3, "publish": 2}


def test_an_async_workflow_is_checked_task_by_task() -> None:
    with stalwart.Stalwart("memory://") as app:
        version = {"v": 1}
        calls = Counter[str]()

        @app.step(name="fetch")
        async def fetch(source: str) -> str:
            calls[source] += 1
            return source

        @app.step(name="check")
        async def check(source: str) -> str:
            calls["check"] += 1
            return source

        async def branch(source: str) -> str:
            if version["v"] == 2 and source == "b":
                await check(source)  # inserted in the second task only
            return await fetch(source)

        @app.workflow(name="gatherer")
        async def gatherer() -> list[str]:
            got = await asyncio.gather(branch("a"), branch("b"))
            await stalwart.wait_for_event_async("more")
            return list(got)

        handle = app.start(gatherer, workflow_id="g")
        with _serving(app):
            _until(app, "g", "suspended")
        assert app.check() == [stalwart.CheckResult("g", True)]
        version["v"] = 2
        (result,) = app.check()
        b_seq = next(e.seq for e in app.journal("g") if e.kind == "step" and e.output == "b")
        assert result == stalwart.CheckResult(
            "g", False, b_seq, "step fetch", "step check", "diverged"
        )
        assert calls == {"a": 1, "b": 1}
        assert handle.status() == "suspended"


# -- the command line, as a real subprocess ----------------------------------------------------


def _cli(*args: str, cwd: Path, url: str) -> subprocess.CompletedProcess[str]:
    return _stalwart(*args, cwd=cwd, env={"STALWART_URL": url, "PYTHONPATH": str(cwd)})


@pytest.fixture
def sqlite_fleet(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    _fleet(tmp_path, url, Counter())
    for name, source in (("same", V1), ("inserts", V2_INSERTS), ("renames", V3_RENAMES)):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source) + AS_APP)
    return url


def test_stalwart_check_exits_0_when_every_run_replays(sqlite_fleet: str, tmp_path: Path) -> None:
    done = _cli("check", "same:app", cwd=tmp_path, url=sqlite_fleet)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 run(s) checked: every one replays on this code\n"
    assert done.stderr.startswith("store: sqlite:///")


def test_stalwart_check_writes_no_queue_or_schedule_the_release_declares(
    sqlite_fleet: str, tmp_path: Path
) -> None:
    """Importing the release runs its app.queue and app.schedule calls: a check against the
    production store must not apply them there."""
    with stalwart.Stalwart(sqlite_fleet) as app:
        app.queue("llm", concurrency=2)
        before = (app.queues(), app.schedules())
    release = (
        "\napp.queue('llm', concurrency=50)\n"
        "app.schedule(writer, '0 9 * * *', name='daily', args=('news',), catch_up='all')\n"
    )
    (tmp_path / "release.py").write_text((tmp_path / "same.py").read_text() + release)
    done = _cli("check", "release:app", cwd=tmp_path, url=sqlite_fleet)
    assert done.returncode == 0, done.stderr
    with stalwart.Stalwart(sqlite_fleet) as app:
        assert (app.queues(), app.schedules()) == before
        assert [q.concurrency for q in app.queues() if q.name == "llm"] == [2]


def test_stalwart_check_exits_1_and_names_each_divergence(
    sqlite_fleet: str, tmp_path: Path
) -> None:
    done = _cli("check", "inserts:app", cwd=tmp_path, url=sqlite_fleet)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "WORKFLOW ID  RESULT    SEQ  RECORDED      REQUESTED",
        "late         diverged    3  step publish  step check_facts",
        "3 run(s) checked: 1 diverged",
    ]
    assert "diverged: guard the change with stalwart.patched(" in done.stderr
    stranded = _cli("check", "renames:app", cwd=tmp_path, url=sqlite_fleet)
    assert stranded.returncode == 1
    assert stranded.stdout.splitlines()[-1] == "3 run(s) checked: 3 stranded"
    assert "stranded: keep registering the workflow" in stranded.stderr


def test_stalwart_check_json_and_status(sqlite_fleet: str, tmp_path: Path) -> None:
    done = _cli("check", "inserts:app", "--json", cwd=tmp_path, url=sqlite_fleet)
    assert done.returncode == 1
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows == [
        {"workflow_id": "early", "ok": True, "seq": None, "recorded": None, "requested": None,
         "reason": None},
        {"workflow_id": "late", "ok": False, "seq": 3, "recorded": "step publish",
         "requested": "step check_facts", "reason": "diverged"},
        {"workflow_id": "queued", "ok": True, "seq": None, "recorded": None, "requested": None,
         "reason": None},
    ]  # fmt: skip
    assert "3 run(s) checked: 1 diverged" in done.stderr
    pending = _cli("check", "inserts:app", "--status", "pending", "--json", cwd=tmp_path,
                   url=sqlite_fleet)  # fmt: skip
    assert pending.returncode == 0, pending.stderr
    assert [json.loads(line)["workflow_id"] for line in pending.stdout.splitlines()] == ["queued"]
    suspended = _cli("check", "inserts:app", "--status", "suspended", cwd=tmp_path,
                     url=sqlite_fleet)  # fmt: skip
    assert suspended.returncode == 1
    assert suspended.stdout.splitlines()[-1] == "2 run(s) checked: 1 diverged"
    terminal = _cli("check", "inserts:app", "--status", "completed", cwd=tmp_path, url=sqlite_fleet)
    assert terminal.returncode == 2 and terminal.stderr.startswith("error: ")
    other = _cli("check", "inserts:app", "--url", "sqlite:///other.db", cwd=tmp_path,
                 url=sqlite_fleet)  # fmt: skip
    assert other.returncode == 2  # nothing was checked: CI tells it from a divergence
    assert other.stderr.startswith("error: inserts:app uses the store")
    for target in ("nosuch:app", "inserts"):
        broken = _cli("check", target, cwd=tmp_path, url=sqlite_fleet)
        assert broken.returncode == 2 and broken.stderr.startswith("error: "), broken.stderr


def test_stalwart_check_does_not_migrate_the_store_it_checks(
    sqlite_fleet: str, tmp_path: Path
) -> None:
    import sqlite3

    db = tmp_path / "fleet.db"
    with sqlite3.connect(db) as conn:  # as if the fleet still ran the release before
        conn.execute("DELETE FROM stalwart_schema WHERE version = (SELECT max(version) FROM "
                     "stalwart_schema)")  # fmt: skip
        (older,) = conn.execute("SELECT max(version) FROM stalwart_schema").fetchone()
    done = _cli("check", "same:app", cwd=tmp_path, url=sqlite_fleet)
    assert done.returncode == 2, done.stderr
    from stalwart._store.base import SCHEMA_VERSION  # the version the deleted row recorded

    assert f"has schema version {older} and this code needs {SCHEMA_VERSION}" in done.stderr
    assert "without migrating it" in done.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT max(version) FROM stalwart_schema").fetchone() == (older,)
    missing = _cli("check", "same:app", cwd=tmp_path, url=f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.returncode == 2 and "has no stalwart schema" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    in_memory = _cli("check", "same:app", cwd=tmp_path, url="memory://")
    assert in_memory.returncode == 0, in_memory.stderr  # nothing kept, nothing to refuse
    assert in_memory.stdout == "0 run(s) checked: every one replays on this code\n"


def _worker_start(tmp_path: Path, url: str, *args: str) -> list[str]:
    """What a real ``stalwart worker`` writes to stderr until it says it serves; then it is
    stopped with SIGTERM."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "stalwart", "worker", *args],
        cwd=tmp_path,
        env={**os.environ, "STALWART_URL": url, "PYTHONPATH": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert worker.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(worker.stderr), daemon=True)
    reader.start()  # lines as the worker writes them (a file iterator yields each line)
    try:
        deadline = time.monotonic() + 30
        while not any("serving the store" in line for line in lines):
            assert time.monotonic() < deadline and worker.poll() is None, lines
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        reader.join(30)
        worker.stderr.close()
    assert worker.returncode == 0, lines
    return lines


def test_a_worker_warns_at_start_about_stranded_runs_in_its_queues(
    sqlite_fleet: str, tmp_path: Path
) -> None:
    lines = _worker_start(tmp_path, sqlite_fleet, "renames:app")
    (warning,) = [line for line in lines if "stranded" in line]
    assert " WARNING " in warning
    assert "3 run(s) of workflow 'writer'" in warning
    assert "stalwart check" in warning


def test_a_worker_of_other_queues_does_not_warn(sqlite_fleet: str, tmp_path: Path) -> None:
    lines = _worker_start(tmp_path, sqlite_fleet, "renames:app", "--queue", "elsewhere")
    assert not [line for line in lines if "stranded" in line]


def test_child_starts_are_compared_and_replayed_past_while_the_children_run(
    store_url: str,
) -> None:
    """A started child whose end the parent has not seen yet replays without acting, so a change
    in a later start is found; the children are runs in flight too and are checked as such."""
    with stalwart.Stalwart(store_url) as app:
        version = {"v": 1}

        @app.workflow(name="kid")
        def kid(tag: str) -> str:
            return f"{tag}: {stalwart.wait_for_event('go')}"

        @app.workflow(name="other_kid")
        def other_kid(tag: str) -> str:
            return tag

        @app.workflow(name="parent")
        def parent() -> list[Any]:
            first = stalwart.start_child(kid, "a")
            second = stalwart.start_child(kid if version["v"] == 1 else other_kid, "b")
            return [first.result(), second.result()]

        app.start(parent, workflow_id="p")
        with _serving(app):
            for wid in ("p", "p/0", "p/1"):
                _until(app, wid, "suspended")
        before = _snapshot(app)
        assert app.check() == [stalwart.CheckResult(w, True) for w in ("p", "p/0", "p/1")]
        version["v"] = 2
        assert app.check(["p"]) == [
            stalwart.CheckResult("p", False, 2, "child kid", "child other_kid", "diverged")
        ]
        assert _snapshot(app) == before


def test_shared_context_calls_are_replayed_and_the_next_write_is_never_made(
    store_url: str,
) -> None:
    """A run that read and wrote a shared key, then waits, replays those answers; the write
    its code makes after the wait (the frontier) is not made by a check."""
    with stalwart.Stalwart(store_url) as app:
        version = {"v": 1}

        @app.workflow(name="planner")
        def planner() -> int:
            plan = stalwart.shared_get("plan")
            stalwart.shared_set("plan", ["draft"], if_version=plan.version)
            stalwart.wait_for_event("go")
            key = "plan" if version["v"] == 1 else "other"
            stalwart.shared_set(key, ["draft", "final"])
            return 1

        app.start(planner, workflow_id="s")
        with _serving(app):
            _until(app, "s", "suspended")
        before = _snapshot(app), app.shared_history("plan")
        assert app.check() == [stalwart.CheckResult("s", True)]
        version["v"] = 2
        assert app.check() == [stalwart.CheckResult("s", True)]  # past the wait: not replayed
        assert (_snapshot(app), app.shared_history("plan")) == before
        assert app.shared_get("other") == stalwart.Versioned(None, 0)


def test_a_patch_before_a_gather_the_run_went_past_takes_the_old_branch() -> None:
    with stalwart.Stalwart("memory://") as app:
        version = {"v": 1}
        calls = Counter[str]()

        @app.step(name="fetch")
        async def fetch(source: str) -> str:
            calls[source] += 1
            return source

        @app.step(name="audit")
        async def audit() -> str:
            calls["audit"] += 1
            return "audited"

        async def later() -> str:
            await stalwart.wait_for_event_async("more")
            return await fetch("b")

        @app.workflow(name="gathers")
        async def gathers() -> list[str]:
            first = []
            if version["v"] == 2 and stalwart.patched("audit-first"):
                first.append(await audit())
            # the run waits inside the gather: its main task has recorded no call of its own
            return first + list(await asyncio.gather(fetch("a"), later()))

        app.start(gathers, workflow_id="old")
        with _serving(app):
            _until(app, "old", "suspended")
        version["v"] = 2
        assert app.check() == [stalwart.CheckResult("old", True)]
        app.send_event("old", "more", None)
        assert app.run(gathers, workflow_id="old") == ["a", "b"]  # it went past: old branch
        assert calls["audit"] == 0
        app.start(gathers, workflow_id="new")
        app.send_event("new", "more", None)
        assert app.run(gathers, workflow_id="new") == ["audited", "a", "b"]  # a new run: new
        assert calls == {"a": 2, "b": 2, "audit": 1}
