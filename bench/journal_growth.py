"""What the journal of a conversation agent costs on SQLite, against the conversation itself.

The agent of the issue: each turn appends a user message (about 320 bytes), then one LLM step
receives the whole conversation so far and its reply (about 300 bytes) is appended, so every
step's input is the conversation, and it stays in the journal for the audit trail. Each size
runs on a fresh SQLite store. Stored bytes are every value the store keeps for the run: the
payloads table (whole payloads, pieces and tree nodes) and the payload columns of the journal
and the run; page slack aside. The keys column adds the digests the payloads table is keyed
by, which the ratio leaves out. On disk is what the run added to the database file: its size
after ``PRAGMA wal_checkpoint(TRUNCATE)`` and ``VACUUM``, less the size of the same store
empty (its schema's pages), so every row, key, index entry and page's slack counts.

The main table is varied text: words drawn at random from a vocabulary of 2,000 made-up words
(a seeded generator, so every run of the bench writes the same bytes), which compress about
as badly as prose does. Targets there: at most 1.5x the conversation stored and 2.0x on disk
at 100 turns, and 200 turns cost at most 2.05x what 100 do. The issue's first messages
repeated one sentence, which flatters compression; that table follows, for comparison.

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
from typing import NamedTuple

import stalwart

TARGET_RATIO = 1.5  # stored, at 100 turns
TARGET_DISK = 2.0  # on disk, at 100 turns
TARGET_GROWTH = 2.05  # 200 turns against 100
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


def vacuumed_size(path: Path) -> int:
    """The size of the database file at ``path`` once its WAL is checkpointed and it is
    vacuumed."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


def empty_size(folder: str) -> int:
    """What a store with no run takes on disk: the pages of its schema."""
    path = Path(folder) / "empty.db"
    with stalwart.Stalwart(f"sqlite:///{path}"):
        pass
    return vacuumed_size(path)


class Measured(NamedTuple):
    """One agent's figures."""

    conversation: int
    stored: int
    keys: int
    disk: int
    seconds: float


def run_agent(folder: str, turns: int, text: Text) -> Measured:
    """What one agent of ``turns`` stored, on a fresh store in ``folder``."""
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
    disk = vacuumed_size(path) - empty_size(folder)
    return Measured(len(json.dumps(final).encode()), int(stored), int(keys), disk, elapsed)


def table(title: str, sizes: list[int], text: Callable[[], Text]) -> dict[int, Measured]:
    """Print one table; the figures per size."""
    print(title)
    print(
        f"{'turns':>6}{'conversation':>14}{'stored':>11}{'ratio':>8}{'with keys':>11}"
        f"{'on disk':>11}{'ratio':>8}{'ms/step':>9}"
    )
    by_size = {}
    for turns in sizes:
        with tempfile.TemporaryDirectory(prefix="stalwart-bench-") as folder:
            m = run_agent(folder, turns, text())
        by_size[turns] = m
        print(
            f"{turns:>6}{m.conversation:>14,}{m.stored:>11,}{m.stored / m.conversation:>7.2f}x"
            f"{(m.stored + m.keys) / m.conversation:>10.2f}x{m.disk:>11,}"
            f"{m.disk / m.conversation:>7.2f}x{m.seconds * 1e3 / turns:>9.2f}",
            flush=True,
        )
    if 100 in by_size and 200 in by_size:
        growth = by_size[200].stored / by_size[100].stored
        disk_growth = by_size[200].disk / by_size[100].disk
        print(f"growth 200/100 turns: {growth:.2f}x stored, {disk_growth:.2f}x on disk")
    print()
    return by_size


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
    main_table = table("a conversation agent on varied text", sizes, varied)
    table("the same agent on the issue's repetitive text", sizes, lambda: repetitive)
    if 100 in main_table and 200 in main_table:
        at100, at200 = main_table[100], main_table[200]
        ratio, disk = at100.stored / at100.conversation, at100.disk / at100.conversation
        growth = max(at200.stored / at100.stored, at200.disk / at100.disk)
        met = ratio <= TARGET_RATIO and disk <= TARGET_DISK and growth <= TARGET_GROWTH
        print(
            f"target (varied text): at most {TARGET_RATIO}x stored and {TARGET_DISK}x on disk "
            f"at 100 turns, {TARGET_GROWTH}x from 100 to 200 turns: "
            f"{'MET' if met else 'NOT MET'} ({ratio:.2f}x, {disk:.2f}x, {growth:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
