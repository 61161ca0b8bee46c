"""Changing code under running agents: ``stalwart.patched`` across a real deploy, and
``app.check()`` (the dry replay a team runs before a deploy) on SQLite and PostgreSQL.

A deploy here is real: each version of the workflow is its own module file; runs start and
suspend under version 1 served by a worker, that app is closed, and an app built from version 2
on the same store resumes them."""

from __future__ import annotations

import importlib.util
import itertools
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
from stalwart import testing

_modules = itertools.count()

V1 = """
import stalwart

def build(url, calls):
    app = stalwart.Stalwart(url)

    @app.step(name="draft")
    def draft(topic: str) -> str:
        calls["draft"] += 1
        return f"draft of {topic}"

    @app.step(name="publish")
    def publish(text: str) -> str:
        calls["publish"] += 1
        return f"published {text}"

    @app.workflow(name="writer")
    def writer(topic: str) -> list:
        text = draft(topic)
        note = stalwart.wait_for_event("review")
        return [publish(text), note]

    return app, writer
"""

# Version 2 patches two points: one before the review (old runs went past it) and one after.
V2_PATCHED = """
import stalwart

def build(url, calls):
    app = stalwart.Stalwart(url)

    @app.step(name="outline")
    def outline(topic: str) -> str:
        calls["outline"] += 1
        return f"outline of {topic}"

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

    @app.workflow(name="writer")
    def writer(topic: str) -> list:
        branches = []
        if stalwart.patched("outline-first"):
            outline(topic)
            branches.append("outline-first")
        text = draft(topic)
        note = stalwart.wait_for_event("review")
        if stalwart.patched("check-facts"):
            text = check_facts(text)
            branches.append("check-facts")
        published = publish(text)
        stalwart.wait_for_event("ship")
        return [published, note, branches]

    return app, writer
"""


def _version(tmp_path: Path, source: str) -> Callable[..., Any]:
    """A version of the workflow module, imported from its own file; returns its ``build``."""
    name = f"evolution_v{next(_modules)}"
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


def _until_shipping(app: stalwart.Stalwart, wid: str) -> None:
    """Until ``wid`` waits for "ship": suspended, with its publish step journaled (it is still
    suspended for "review" for a moment after the review was sent)."""
    deadline = time.monotonic() + 30
    while app.handle(wid).status() != "suspended" or not any(
        e.name == "publish" for e in app.journal(wid)
    ):
        assert time.monotonic() < deadline, f"{wid} never waited to ship"
        time.sleep(0.02)


def _patches(app: stalwart.Stalwart, wid: str) -> list[tuple[int | None, str]]:
    return [(e.seq, e.name) for e in app.journal(wid) if e.kind == "patch"]


def _on_v1(tmp_path: Path, url: str, calls: Counter[str], *ids: str) -> None:
    """Start runs under version 1 and serve them until each waits for its review."""
    app, writer = _version(tmp_path, V1)(url, calls)
    with app, _serving(app):
        for wid in ids:
            app.start(writer, wid, workflow_id=wid)
        for wid in ids:
            _until(app, wid, "suspended")


def test_patched_keeps_old_runs_on_the_old_branch_and_new_runs_on_the_new(
    shared_url: str, tmp_path: Path
) -> None:
    calls = Counter[str]()
    _on_v1(tmp_path, shared_url, calls, "old")
    assert calls == {"draft": 1}

    app, writer = _version(tmp_path, V2_PATCHED)(shared_url, calls)
    with app, _serving(app):
        # The deploy replays: the old run went past "outline-first" before the patch existed.
        assert app.check() == [stalwart.CheckResult("old", True)]
        app.start(writer, "new", workflow_id="new")
        _until(app, "new", "suspended")
        for wid in ("old", "new"):
            app.send_event(wid, "review", f"ok {wid}")
        for wid in ("old", "new"):
            _until_shipping(app, wid)  # replayed once more after this
        assert [r.ok for r in app.check()] == [True, True]
        for wid in ("old", "new"):
            app.send_event(wid, "ship", None)
        old = app.handle("old").result(timeout=30)
        new = app.handle("new").result(timeout=30)
        old_patches, new_patches = _patches(app, "old"), _patches(app, "new")

    # Passed before the deploy: the old branch, on every replay. Reached after it: the new one.
    assert old == ["published draft of old (checked)", "ok old", ["check-facts"]]
    assert old_patches == [(3, "check-facts")]
    # A new run takes every new branch.
    assert new == ["published draft of new (checked)", "ok new", ["outline-first", "check-facts"]]
    assert new_patches == [(1, "outline-first"), (5, "check-facts")]
    # Nothing ran twice: one draft per run, the outline only for the new one.
    assert calls == {"draft": 2, "outline": 1, "check_facts": 2, "publish": 2}


def test_each_patch_point_is_decided_once_at_its_position(store_url: str) -> None:
    """A patch point is recorded where it is called: the same call in a loop is decided at
    each of its positions, and the replay after the sleep finds each decision where it was
    recorded."""
    with stalwart.Stalwart(store_url) as app:

        @app.step
        def a() -> str:
            return "a"

        @app.workflow(name="loop")
        def loop(rounds: int) -> list[bool]:
            seen = []
            for _ in range(rounds):
                seen.append(stalwart.patched("p"))  # one place, reached again
                a()
            stalwart.sleep(0.01)
            return seen

        assert app.run(loop, 2, workflow_id="f1") == [True, True]
        assert _patches(app, "f1") == [(1, "p"), (3, "p")]


def test_one_patch_id_asked_at_a_second_place_is_refused(app: stalwart.Stalwart) -> None:
    @app.step
    def a() -> str:
        return "a"

    @app.workflow(name="twice")
    def twice() -> list[bool]:
        seen = [stalwart.patched("p")]
        a()
        seen.append(stalwart.patched("p"))  # the same id at another place
        return seen

    with pytest.raises(stalwart.NeedsAttention, match="patch id 'p' is asked for at"):
        app.run(twice, workflow_id="t")
    detail = app.describe("t").info
    assert detail.status == "needs_attention"
    assert detail.error is not None and "RegistrationError" in detail.error
    assert _patches(app, "t") == [(1, "p")]  # the second place decided nothing


def test_a_second_place_is_found_in_code_beside_the_stalwart_package(
    app: stalwart.Stalwart,
) -> None:
    """Code in a folder whose name starts like stalwart's (``.../stalwart_app/``) is the
    user's: its patch points are told apart, not skipped as stalwart's own frames."""
    sibling = str(Path(stalwart.__file__).resolve().parent) + "_app/agent.py"
    source = (
        "def twice():\n"
        "    seen = [stalwart.patched('p')]\n"
        "    seen.append(stalwart.patched('p'))\n"
        "    return seen\n"
    )
    scope: dict[str, Any] = {"stalwart": stalwart}
    exec(compile(source, sibling, "exec"), scope)  # its frames carry the sibling's path
    twice = app.workflow(name="twice_beside")(scope["twice"])
    with pytest.raises(stalwart.NeedsAttention, match="patch id 'p' is asked for at"):
        app.run(twice, workflow_id="beside")


def test_patched_needs_a_workflow_and_a_name(app: stalwart.Stalwart) -> None:
    with pytest.raises(RuntimeError, match="inside a workflow"):
        stalwart.patched("p")

    @app.step
    def inside() -> bool:
        return stalwart.patched("p")

    @app.workflow
    def bad_id() -> bool:
        return stalwart.patched("")

    @app.workflow
    def in_step() -> bool:
        return inside()

    with pytest.raises(stalwart.WorkflowFailed, match="non-empty str"):
        app.run(bad_id)
    with pytest.raises(stalwart.WorkflowFailed, match="inside a step"):
        app.run(in_step)


def test_a_fork_reuses_recorded_values_and_patch_decisions(app: stalwart.Stalwart) -> None:
    @app.step
    def count() -> int:
        return 1

    @app.workflow(name="forked")
    def forked() -> list[Any]:
        return [stalwart.now(), stalwart.uuid4(), stalwart.patched("p"), count()]

    first = app.run(forked, workflow_id="src")
    app.fork("src", from_seq=4, new_id="copy")
    assert app.run(forked, workflow_id="copy") == first  # replayed, not read as damage
    assert [e.status for e in app.journal("copy") if e.seq in (1, 2, 3)] == ["reused"] * 3
