"""A LangGraph graph run with StalwartSaver in a child process is SIGKILLed mid-graph; a new
process resumes the thread from its checkpoint, and no node whose result was checkpointed runs
again (LangGraph's promise, kept by the saver): only the node that was running when the process
died runs twice.

Two places to die: inside ``slow`` while ``fetch``, its parallel sibling in the same superstep,
has finished (its result is a pending write of the checkpoint, not yet a checkpoint of its own),
and inside ``answer``, after the superstep of both was checkpointed. Both with LangGraph's
``sync`` durability and its default ``async`` one: the kill waits until the store shows what
the promise is about, as ``async`` writes a checkpoint while the next step already runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_harness import MARKER_WAIT_S, Harness
from langgraph_crash_graph import build

import stalwart
from stalwart.integrations.langgraph import StalwartSaver

PROGRAM = Path(__file__).with_name("langgraph_crash_graph.py")


class GraphHarness(Harness):
    """The crash harness, spawning the graph program instead of a stalwart agent."""

    def spawn_graph(
        self, thread: str, *, hang: str | None = None, durability: str = "sync"
    ) -> subprocess.Popen[str]:
        cmd = [sys.executable, str(PROGRAM), self.url, str(self.workdir), thread]
        cmd += ["--durability", durability] + (["--hang", hang] if hang else [])
        return self.spawn_program(cmd)


@pytest.fixture
def graphs(tmp_path: Path, shared_url: str) -> Iterator[GraphHarness]:
    harness = GraphHarness(tmp_path, shared_url)
    try:
        yield harness
    finally:
        harness.close()


def _state(url: str, workdir: Path, thread: str) -> Any:
    with stalwart.Stalwart(url) as app:
        graph = build(StalwartSaver(app), workdir, thread, None)
        return graph.get_state({"configurable": {"thread_id": thread}})


def _fetch_is_a_pending_write(state: Any) -> bool:
    return any(task.name == "fetch" and task.result is not None for task in state.tasks)


def _answer_is_next(state: Any) -> bool:
    return tuple(state.next) == ("answer",)


@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize(
    ("node", "checkpointed", "runs"),
    [
        ("slow", _fetch_is_a_pending_write, {"plan": 1, "fetch": 1, "slow": 2, "answer": 1}),
        ("answer", _answer_is_next, {"plan": 1, "fetch": 1, "slow": 1, "answer": 2}),
    ],
)
def test_a_killed_graph_resumes_without_repeating_checkpointed_nodes(
    graphs: GraphHarness,
    durability: str,
    node: str,
    checkpointed: Callable[[Any], bool],
    runs: dict[str, int],
) -> None:
    thread = f"research-{node}-{durability}"
    started = time.monotonic()
    proc = graphs.spawn_graph(thread, hang=node, durability=durability)
    graphs.wait_until_running(proc, thread, [node])
    deadline = time.monotonic() + MARKER_WAIT_S
    while not checkpointed(_state(graphs.url, graphs.workdir, thread)):
        assert time.monotonic() < deadline, "the store never showed the checkpointed work"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    killed = graphs.finish(proc, started)
    assert killed.killed, killed.describe()
    assert graphs.counts(thread)[node] == 1

    resumed = graphs.finish(graphs.spawn_graph(thread, durability=durability), time.monotonic())
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.outcome == {
        "answer": "fetched / plan for why is the sky blue? / slow done",
        "notes": ["plan for why is the sky blue?", "fetched", "slow done"],
        "question": "why is the sky blue?",
    }
    assert dict(graphs.counts(thread)) == runs
    assert _state(graphs.url, graphs.workdir, thread).next == ()
