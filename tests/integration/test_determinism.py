"""Replay divergence is detected, never silently followed."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import stalwart


class Interrupt(KeyboardInterrupt):
    """Stops an in-process run mid-way so that its code can change before it resumes."""


def _two_versions(
    app: stalwart.Stalwart, second: Callable[[dict[str, Any]], list[str]]
) -> tuple[Any, Counter[str]]:
    """A workflow that records [a, b, stop] and then is replayed by changed code."""
    calls = Counter[str]()
    version = {"v": 1}

    def make(name: str) -> Any:
        @app.step(name=name)
        def step() -> str:
            calls[name] += 1
            return name

        return step

    steps = {n: make(n) for n in ("a", "b", "c")}

    @app.step(name="stop")
    def stop() -> None:
        if version["v"] == 1:
            raise Interrupt

    @app.workflow(name="agent")
    def agent() -> list[str]:
        order = ["a", "b"] if version["v"] == 1 else second(version)
        out = [steps[n]() for n in order]
        stop()
        return out

    with pytest.raises(Interrupt):
        app.run(agent, workflow_id="d1")
    version["v"] = 2
    return agent, calls


@pytest.mark.parametrize(
    ("second", "seq", "recorded", "requested"),
    [
        (lambda v: ["b", "a"], 1, "a", "b"),  # reordered
        (lambda v: ["a", "c"], 2, "b", "c"),  # replaced
    ],
    ids=["reordered", "replaced"],
)
def test_a_different_step_at_a_recorded_position(
    app: stalwart.Stalwart, second: Any, seq: int, recorded: str, requested: str
) -> None:
    agent, calls = _two_versions(app, second)
    with pytest.raises(stalwart.NeedsAttention) as info:
        app.run(agent, workflow_id="d1")
    assert f"seq {seq}" in info.value.reason
    assert f"step {recorded!r}" in info.value.reason and f"step {requested!r}" in info.value.reason
    assert app.handle("d1").status() == "needs_attention"
    assert calls["c"] == 0  # nothing of the changed code ran past the divergence
    assert calls["a"] == calls["b"] == 1
    with pytest.raises(stalwart.NeedsAttention):  # and it stays there until an operator acts
        app.run(agent, workflow_id="d1")
    assert [e.name for e in app.journal("d1") if e.kind == "run"][-1] == "needs_attention"
    with pytest.raises(TimeoutError):  # needs_attention is not terminal
        app.handle("d1").result(timeout=0.01)


def test_a_removed_step_is_caught_when_the_code_ends(app: stalwart.Stalwart) -> None:
    agent, _calls = _two_versions(app, lambda v: ["a"])
    with pytest.raises(stalwart.NeedsAttention, match="recorded step 'b'"):
        app.run(agent, workflow_id="d1")


def test_code_that_ends_before_its_recorded_steps(app: stalwart.Stalwart) -> None:
    version = {"v": 1}

    @app.step(name="s")
    def s() -> int:
        return 1

    @app.step(name="halt")
    def halt() -> None:
        raise Interrupt

    @app.workflow(name="w")
    def w() -> int:
        s()
        if version["v"] == 1:
            s()
            halt()
        return 0

    with pytest.raises(Interrupt):
        app.run(w, workflow_id="d4")
    version["v"] = 2
    with pytest.raises(stalwart.NeedsAttention, match="ended without calling it"):
        app.run(w, workflow_id="d4")


def test_catching_the_error_in_workflow_code_does_not_help(app: stalwart.Stalwart) -> None:
    version = {"v": 1}

    @app.step(name="x")
    def x() -> int:
        return 1

    @app.step(name="y")
    def y() -> int:
        return 2

    @app.step(name="halt")
    def halt() -> None:
        if version["v"] == 1:
            raise Interrupt

    @app.workflow(name="w")
    def w() -> str:
        with contextlib.suppress(Exception):
            (x if version["v"] == 1 else y)()
        halt()
        return "ok"

    with pytest.raises(Interrupt):
        app.run(w, workflow_id="d2")
    version["v"] = 2
    with pytest.raises(stalwart.NeedsAttention):
        app.run(w, workflow_id="d2")


def test_a_value_call_in_place_of_a_step(app: stalwart.Stalwart) -> None:
    version = {"v": 1}

    @app.step(name="s")
    def s() -> int:
        return 1

    @app.step(name="halt")
    def halt() -> None:
        if version["v"] == 1:
            raise Interrupt

    @app.workflow(name="w")
    def w() -> Any:
        if version["v"] == 2:
            stalwart.now()
        s()
        return halt()

    with pytest.raises(Interrupt):
        app.run(w, workflow_id="d3")
    version["v"] = 2
    with pytest.raises(stalwart.NeedsAttention, match="now"):
        app.run(w, workflow_id="d3")
