"""What a LangGraph thread costs in the store: StalwartSaver against LangGraph's SqliteSaver.

The thread of the issue: a chat graph whose state is a growing message list (``add_messages``).
Each turn invokes the graph with a user message (about 300 bytes of varied text); its one node
appends a reply of about the same size. LangGraph checkpoints after the input and after each
step (three checkpoints a turn), and each checkpoint's state holds the whole conversation so far.
SqliteSaver stores every checkpoint whole; StalwartSaver stores each channel value once per
version and a list as what each version adds to the one before.

Both savers run the same turns in one process, each on a fresh SQLite file. Stored bytes are
the value columns of the savers' tables (checkpoints, metadata, channel values, writes; keys
and page slack aside); "file" is the database file after a checkpoint of its WAL and a VACUUM.
The conversation is the final message list as LangGraph's serializer writes it (what the
thread's state is), and "text" the same messages as JSON role/content pairs. Target: at most
2x the conversation at 100 turns for StalwartSaver.

    python bench/langgraph_growth.py [--turns 50 100 200]

It is a benchmark, not a test: it exits 0 whether or not the target is met.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

import stalwart
from stalwart.integrations.langgraph import StalwartSaver

TARGET_RATIO = 2.0  # StalwartSaver, at 100 turns
STALWART_BYTES = """
SELECT (SELECT coalesce(sum(length(checkpoint)) + sum(length(metadata)), 0)
        FROM ext_langgraph_checkpoints)
     + (SELECT coalesce(sum(length(data)) + sum(length(digest)), 0) FROM ext_langgraph_blobs)
     + (SELECT coalesce(sum(length(value)), 0) FROM ext_langgraph_writes)
"""
SQLITE_SAVER_BYTES = """
SELECT (SELECT coalesce(sum(length(checkpoint)) + sum(length(metadata)), 0) FROM checkpoints)
     + (SELECT coalesce(sum(length(value)), 0) FROM writes)
"""


class State(TypedDict):
    """The chat's state: its messages."""

    messages: Annotated[list[BaseMessage], add_messages]


def varied(seed: int = 1) -> Callable[[str, int], str]:
    """Messages of about 300 bytes of words drawn from a vocabulary, different every time."""
    rnd = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocabulary = ["".join(rnd.choices(letters, k=rnd.randint(2, 9))) for _ in range(2000)]

    def text(kind: str, turn: int) -> str:
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 300:
            words.append(rnd.choice(vocabulary))
        return f"{kind} {turn}: " + " ".join(words)

    return text


def chat(checkpointer: Any, turns: int) -> list[BaseMessage]:
    """Run ``turns`` turns of the chat graph on one thread; its final messages."""
    text = varied()

    def reply(state: State) -> dict[str, list[BaseMessage]]:
        return {"messages": [AIMessage(content=text("reply", len(state["messages"])))]}

    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": f"chat-{turns}"}}
    state: dict[str, Any] = {}
    for turn in range(turns):
        state = graph.invoke({"messages": [HumanMessage(content=text("question", turn))]}, config)
    messages: list[BaseMessage] = state["messages"]
    return messages


def _file_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return path.stat().st_size


def _column_bytes(path: Path, query: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(query).fetchone()[0])
    finally:
        conn.close()


def measure(folder: Path, turns: int) -> dict[str, Any]:
    """One size: the conversation, and what each saver stored for it."""
    stalwart_db, sqlite_db = folder / f"stalwart-{turns}.db", folder / f"sqlite-{turns}.db"
    start = time.perf_counter()
    with stalwart.Stalwart(f"sqlite:///{stalwart_db}") as app:
        final = chat(StalwartSaver(app), turns)
    stalwart_s = time.perf_counter() - start
    start = time.perf_counter()
    with SqliteSaver.from_conn_string(str(sqlite_db)) as saver:
        chat(saver, turns)
    sqlite_s = time.perf_counter() - start
    text = [{"role": m.type, "content": m.content} for m in final]
    return {
        "turns": turns,
        "conversation": len(JsonPlusSerializer().dumps_typed(final)[1]),
        "text": len(json.dumps(text).encode()),
        "stalwart": _column_bytes(stalwart_db, STALWART_BYTES),
        "stalwart_file": _file_bytes(stalwart_db),
        "sqlite": _column_bytes(sqlite_db, SQLITE_SAVER_BYTES),
        "sqlite_file": _file_bytes(sqlite_db),
        "stalwart_ms": stalwart_s * 1e3 / turns,
        "sqlite_ms": sqlite_s * 1e3 / turns,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, nargs="+", default=[50, 100, 200], help="sizes")
    args = parser.parse_args(argv)
    if any(t < 1 for t in args.turns):
        parser.error("--turns must be >= 1")
    warnings.simplefilter("ignore")  # LangGraph's deprecation notices are not the subject
    print(
        f"stalwart {stalwart.__version__}: bytes a LangGraph chat thread stores, StalwartSaver "
        f"against SqliteSaver, SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    )
    print()
    header = (
        f"{'turns':>5}{'conversation':>13}{'text':>9} | {'StalwartSaver':>13}{'/turn':>8}"
        f"{'ratio':>8}{'file':>11}{'ms/turn':>8} | {'SqliteSaver':>12}{'/turn':>9}{'ratio':>9}"
        f"{'file':>12}{'ms/turn':>8}"
    )
    print(header)
    results = {}
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-") as folder:
        for turns in sorted(set(args.turns)):
            r = measure(Path(folder), turns)
            results[turns] = r
            conv = r["conversation"]
            print(
                f"{turns:>5}{conv:>13,}{r['text']:>9,} | {r['stalwart']:>13,}"
                f"{r['stalwart'] // turns:>8,}{r['stalwart'] / conv:>7.2f}x"
                f"{r['stalwart_file']:>11,}{r['stalwart_ms']:>8.1f} | {r['sqlite']:>12,}"
                f"{r['sqlite'] // turns:>9,}{r['sqlite'] / conv:>8.1f}x{r['sqlite_file']:>12,}"
                f"{r['sqlite_ms']:>8.1f}",
                flush=True,
            )
    print()
    print(
        "ratio: stored bytes / the conversation as LangGraph serializes it; /turn: stored bytes "
        "per turn; against the text alone, StalwartSaver stores "
        + ", ".join(f"{r['stalwart'] / r['text']:.2f}x at {t}" for t, r in results.items())
    )
    if 100 in results:
        ratio = results[100]["stalwart"] / results[100]["conversation"]
        met = ratio <= TARGET_RATIO
        print(
            f"target: StalwartSaver at most {TARGET_RATIO}x the conversation at 100 turns: "
            f"{'MET' if met else 'NOT MET'} ({ratio:.2f}x; SqliteSaver "
            f"{results[100]['sqlite'] / results[100]['conversation']:.0f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
