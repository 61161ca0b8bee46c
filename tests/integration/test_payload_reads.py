"""A SQL store reads every payloads row a read's columns reach before it puts any payload
together: on PostgreSQL the trees in one statement (a recursive query that reads each row as
``garbage.children_of`` does), on SQLite a statement per level; every payload comes back as
it was written, whatever shape its rows have (trees growing turn by turn, pieces deflated
against another row, flat manifests, whole rows, trees of 32-byte keys of older stores)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import stalwart
from stalwart import testing
from stalwart._store import garbage
from stalwart._store.payloads import pack
from stalwart._store.sql.payload_columns import PayloadColumns

OLD_TREES = Path(__file__).parent.parent / "unit" / "data" / "tree_with_32_byte_keys.json"


def _reply(turn: int) -> bytes:
    text = f"answer {turn}: " + " ".join(f"w{turn * 7 + i}" for i in range(60))
    return b"J" + json.dumps(text).encode()


def _chat(turns: int) -> bytes:
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: " + "why? " * 60})
        messages.append({"role": "assistant", "content": json.loads(_reply(i)[1:])})
    return b"J" + json.dumps({"args": [messages], "kwargs": {}}, separators=(",", ":")).encode()


def _written() -> tuple[dict[bytes, bytes], list[bytes | None], list[bytes | None]]:
    """Payloads rows, and column values with the payloads they stand for."""
    rows: dict[bytes, bytes] = {}

    def put(digest: bytes, data: bytes) -> bool:
        new = digest not in rows
        rows[digest] = data
        return new

    columns: list[bytes | None] = [None]
    payloads: list[bytes | None] = [None]
    # a conversation, each turn a tree sharing the turns before it, its newest message
    # deflated against the last step's result; at 400 turns its rest nodes go several levels up
    for turns in (1, 2, 3, 5, 8, 13, 40, 120, 400):
        reply = _reply(turns - 1)
        put(hashlib.sha256(reply).digest(), reply)
        columns.append(pack(_chat(turns), put, dictionary=(hashlib.sha256(reply).digest(), reply)))
        payloads.append(_chat(turns))
    # a result kept whole, one kept as a flat manifest of 60 chunks, one small enough to stay
    for value in ("x" * 3000, [f"line {i}: " + "y" * 300 for i in range(700)], "small"):
        payload = b"J" + json.dumps(value).encode()
        columns.append(pack(payload, put, tree=False))
        payloads.append(payload)
    old = json.loads(OLD_TREES.read_text("utf-8"))
    rows.update({bytes.fromhex(k): bytes.fromhex(v) for k, v in old["rows"].items()})
    for turns, column in old["columns"].items():
        columns.append(bytes.fromhex(column))
        payloads.append(_old_conversation(int(turns)))
    return rows, columns, payloads


def _old_conversation(turns: int) -> bytes:  # what the older store's trees hold
    messages: list[dict[str, str]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: " + "why? " * 60})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "because. " * 40})
    return b"J" + json.dumps({"args": [messages], "kwargs": {}}).encode()


def _below(rows: dict[bytes, bytes], columns: list[bytes | None], width: int = 10**9) -> set[bytes]:
    """The rows the columns reach, walking each row's first ``width`` children; the row a
    piece was deflated against is reached but not walked."""
    reached: set[bytes] = set()
    walked: set[bytes] = set()
    todo = [(key, True) for c in columns if c is not None for key in garbage.referenced_by(c)]
    while todo:
        key, walk = todo.pop()
        if key not in rows:
            continue
        reached.add(key)
        if walk and key not in walked:
            walked.add(key)
            data = rows[key]
            against = data[:1] == garbage.AGAINST_TAG
            todo += [(child, not against) for child in garbage.children_of(data)[:width]]
    return reached


def test_a_read_reaches_every_row_below_its_columns_and_puts_each_payload_together(
    shared_url: str,
) -> None:
    rows, columns, payloads = _written()
    assert {data[:1] for data in rows.values()} >= {b"U", b"V", b"D", b"S", b"M", b"T", b"Q"}
    assert max(len(garbage.children_of(data)) for data in rows.values() if data[:1] == b"M") > 32
    with stalwart.Stalwart(shared_url) as app:
        store: Any = testing.store_of(app)

        def store_rows(conn: Any) -> None:
            for digest, data in rows.items():
                params = {"digest": digest, "data": data, "now": 1.0, "stale": 0.0, "refs": None}
                conn.execute(store._q["put_payload"], params)

        store._write(store_rows)
        reached = store._run(lambda conn: store._reached(conn, columns))
        assert {key for key, data in reached.items() if data is not None} == _below(rows, columns)
        assert store._run(lambda conn: store._load_all(conn, columns)) == payloads

        roots = [key for c in columns if c is not None for key in garbage.referenced_by(c)]
        one_read = store._run(lambda conn: store._rows_below(conn, roots, set()))
        if "postgres" in shared_url:
            # one statement reads what the columns reach but the chunks of a manifest past
            # its 32nd, which the next level's read finds
            assert set(one_read) == _below(rows, columns, width=32) != _below(rows, columns)
        else:
            assert set(one_read) == set(roots) & set(rows)
        level_by_level = store._run(
            lambda conn: PayloadColumns._rows_below(store, conn, list(reached), set())
        )
        assert level_by_level == {k: v for k, v in reached.items() if v is not None}
