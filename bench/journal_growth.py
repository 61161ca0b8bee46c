"""What the journal of a conversation agent costs on SQLite, against the conversation itself.

The agent of the issue: each turn appends a user message (about 320 bytes), then one LLM step
receives the whole conversation so far and its reply (about 300 bytes) is appended, so every
step's input is the conversation, and it stays in the journal for the audit trail. Each size
runs on a fresh SQLite store. Stored bytes are every value the store keeps for the run: the
payloads table (whole payloads, pieces and tree nodes) and the payload columns of the journal
and the run; page slack aside. The keys column adds the 32-byte digests the payloads table is
keyed by, which the ratio leaves out. Targets: at most 1.5x the conversation at 100 turns, and
200 turns cost at most 2.2x what 100 do.

The issue's messages repeat one sentence, so their pieces compress far better than prose; the
second table runs the same agent on varied text (words drawn at random from a vocabulary of
2,000, which zlib shrinks by about half, as it does English), to show what the tree, and not
compression, saves.

    python bench/journal_growth.py [--turns 50 100 200 400]

It is a benchmark, not a test: it exits 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import stalwart

TARGET_RATIO = 1.5  # at 100 turns
TARGET_GROWTH = 2.2  # 200 turns against 100
STORED_BYTES = """
SELECT (SELECT coalesce(sum(length(data)), 0) FROM payloads)
     + (SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM journal)
     + (SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM runs)
"""
KEY_BYTES = "SELECT coalesce(sum(length(digest)), 0) FROM payloads"

Text = Callable[[str, int], str]


def repetitive(kind: str, turn: int) -> str:
    """The issue's messages: one phrase repeated."""
    if kind == "user":
        return f"question {turn}: " + "why? " * 60
    return f"reply {turn}: " + "the assistant considers the question carefully. " * 6


def varied(seed: int = 1) -> Text:
    """Messages of the same sizes in words drawn from a vocabulary, different every time."""
    rnd = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocabulary = ["".join(rnd.choices(letters, k=rnd.randint(2, 9))) for _ in range(2000)]

    def text(kind: str, turn: int) -> str:
        words, size = [], 300 if kind == "user" else 290
        while sum(len(w) + 1 for w in words) < size:
            words.append(rnd.choice(vocabulary))
        return f"{'question' if kind == 'user' else 'reply'} {turn}: " + " ".join(words)

    return text


def run_agent(folder: str, turns: int, text: Text) -> tuple[int, int, int, float]:
    """Conversation bytes, stored bytes, key bytes and seconds of one agent of ``turns``."""
    path = Path(folder) / f"agent-{turns}.db"
    with stalwart.Stalwart(f"sqlite:///{path}") as app:

        @app.step(name="llm")
        def llm(conversation: list[dict[str, str]]) -> str:
            return text("assistant", len(conversation))

        @app.workflow(name="agent")
        def agent(turns: int) -> list[dict[str, str]]:
            conversation: list[dict[str, str]] = []
            for i in range(turns):
                conversation.append({"role": "user", "content": text("user", i)})
                conversation.append({"role": "assistant", "content": llm(conversation)})
            return conversation

        start = time.perf_counter()
        final = app.run(agent, turns, workflow_id=f"chat-{turns}")
        elapsed = time.perf_counter() - start
    conn = sqlite3.connect(path)
    try:
        (stored,) = conn.execute(STORED_BYTES).fetchone()
        (keys,) = conn.execute(KEY_BYTES).fetchone()
    finally:
        conn.close()
    return len(json.dumps(final).encode()), int(stored), int(keys), elapsed


def table(title: str, sizes: list[int], text: Callable[[], Text]) -> dict[int, tuple[int, int]]:
    """Print one table; the conversation and stored bytes per size."""
    print(title)
    print(
        f"{'turns':>6}{'conversation':>14}{'stored':>11}{'ratio':>8}{'with keys':>11}{'ms/step':>9}"
    )
    stored_by_size = {}
    for turns in sizes:
        with tempfile.TemporaryDirectory(prefix="stalwart-bench-") as folder:
            conversation, stored, keys, seconds = run_agent(folder, turns, text())
        stored_by_size[turns] = (conversation, stored)
        print(
            f"{turns:>6}{conversation:>14,}{stored:>11,}{stored / conversation:>7.2f}x"
            f"{(stored + keys) / conversation:>10.2f}x{seconds * 1e3 / turns:>9.2f}",
            flush=True,
        )
    if 100 in stored_by_size and 200 in stored_by_size:
        growth = stored_by_size[200][1] / stored_by_size[100][1]
        print(f"growth 200/100 turns: {growth:.2f}x")
    print()
    return stored_by_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--turns", type=int, nargs="+", default=[50, 100, 200, 400], help="agent sizes"
    )
    args = parser.parse_args(argv)
    if any(t < 1 for t in args.turns):
        parser.error("--turns must be >= 1")
    sizes = sorted(set(args.turns))
    print(
        f"stalwart {stalwart.__version__} journal growth: an agent whose every LLM step receives "
        f"the whole conversation, SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    )
    print()
    issue = table("the issue's agent (repetitive text)", sizes, lambda: repetitive)
    table("the same agent on varied text", sizes, varied)
    if 100 in issue and 200 in issue:
        ratio, growth = issue[100][1] / issue[100][0], issue[200][1] / issue[100][1]
        met = ratio <= TARGET_RATIO and growth <= TARGET_GROWTH
        print(
            f"target: at most {TARGET_RATIO}x at 100 turns and {TARGET_GROWTH}x from 100 to 200 "
            f"turns: {'MET' if met else 'NOT MET'} ({ratio:.2f}x, {growth:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
