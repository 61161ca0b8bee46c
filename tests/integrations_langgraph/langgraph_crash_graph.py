"""The child program of the LangGraph crash test: a graph run plainly with StalwartSaver, in
LangGraph's own execution model (no stalwart workflow around it).

    python langgraph_crash_graph.py URL WORKDIR THREAD [--hang NODE] [--durability MODE]

``plan``, then ``fetch`` and ``slow`` in parallel (one superstep), then ``answer``. Every node
appends one JSON line ``{"wid": THREAD, "step": NODE, "pid": ...}`` to ``WORKDIR/executions.log``
(fsynced) when it really runs. The node named by ``--hang`` then creates the marker
``WORKDIR/running-THREAD-NODE`` and sleeps until the test SIGKILLs the process.

The program starts the thread from its input when the store has no checkpoint of it, else
resumes it from its last checkpoint (``invoke(None, config)``, as LangGraph resumes a thread);
its last stdout line is the final state as JSON.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import stalwart
from stalwart.integrations.langgraph import StalwartSaver

HANG_SECONDS = 120.0  # the test kills the process long before this


class Research(TypedDict, total=False):
    question: str
    notes: Annotated[list[str], operator.add]
    answer: str


def build(saver: StalwartSaver, workdir: Path, thread: str, hang: str | None) -> Any:
    """The graph, its nodes recording their executions in ``workdir``."""

    def ran(node: str) -> None:
        line = json.dumps({"wid": thread, "step": node, "pid": os.getpid(), "at": time.time()})
        fd = os.open(workdir / "executions.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if node == hang:
            (workdir / f"running-{thread}-{node}").touch()
            time.sleep(HANG_SECONDS)

    def plan(state: Research) -> Research:
        ran("plan")
        return {"notes": [f"plan for {state['question']}"]}

    def fetch(state: Research) -> Research:
        ran("fetch")
        return {"notes": ["fetched"]}

    def slow(state: Research) -> Research:
        ran("slow")
        return {"notes": ["slow done"]}

    def answer(state: Research) -> Research:
        ran("answer")
        return {"answer": " / ".join(sorted(state["notes"]))}

    builder = StateGraph(Research)
    for node in (plan, fetch, slow, answer):
        builder.add_node(node.__name__, node)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "fetch")
    builder.add_edge("plan", "slow")
    builder.add_edge("fetch", "answer")
    builder.add_edge("slow", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("thread")
    parser.add_argument("--hang")
    parser.add_argument("--durability", default="sync", choices=["sync", "async", "exit"])
    opts = parser.parse_args(argv)
    config: Any = {"configurable": {"thread_id": opts.thread}}
    with stalwart.Stalwart(opts.url) as app:
        graph = build(StalwartSaver(app), opts.workdir, opts.thread, opts.hang)
        started = graph.get_state(config).values
        inputs = None if started else {"question": "why is the sky blue?"}
        final = graph.invoke(inputs, config, durability=opts.durability)
    print(json.dumps(final, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
