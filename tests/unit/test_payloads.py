"""Payload packing: inline, by digest, or as a tree of content-defined pieces shared across
payloads; rows of older stores (flat manifests, trees of 32-byte keys) still read back."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stalwart import CorruptRecord
from stalwart._store.payloads import (
    CHUNK_LIMIT,
    INLINE_LIMIT,
    NODE_TAG,
    REF_TAG,
    REST_TAG,
    chunk,
    column_of,
    pack,
    unpack,
)

OLD_TREES = Path(__file__).parent / "data" / "tree_with_32_byte_keys.json"
PIECE = b"S"  # a piece deflated against the built-in vocabulary
AGAINST = b"D"  # a piece deflated against a stored row too


class Kept(dict[bytes, bytes]):
    """A payloads table: ``put`` says whether a row was new, ``get`` fetches rows."""

    def put(self, digest: bytes, data: bytes) -> bool:
        if digest in self:
            return False
        self[digest] = data
        return True

    def get(self, digests: list[bytes]) -> dict[bytes, bytes]:
        return {d: self[d] for d in digests}


def _conversation_payload(turns: int) -> bytes:
    messages: list[dict[str, str]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: " + "why? " * 60})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "because. " * 40})
    return b"J" + json.dumps({"args": [messages], "kwargs": {}}).encode()


def _random_json(rnd: random.Random, depth: int = 0) -> Any:
    roll = rnd.random()
    if depth > 4 or roll < 0.3:
        return rnd.choice(
            [rnd.randint(-(10**9), 10**9), "x" * rnd.randint(0, 700), None, True, 2.5, 'é"\\}],']
        )
    if roll < 0.65:
        return [_random_json(rnd, depth + 1) for _ in range(rnd.randint(0, 12))]
    return {f"k{i}": _random_json(rnd, depth + 1) for i in range(rnd.randint(0, 10))}


def test_small_payloads_stay_inline() -> None:
    kept = Kept()
    small = b"J" + b"x" * (INLINE_LIMIT - 1)
    assert pack(small, kept.put) == small and kept == {}
    assert pack(None, kept.put) is None


def test_payloads_up_to_the_chunk_limit_are_stored_whole_under_their_digest() -> None:
    """What an older worker reads (``tree=False``): the payload itself, under its digest."""
    kept = Kept()
    payload = b"J" + json.dumps(["y" * (CHUNK_LIMIT - 10)]).encode()[: CHUNK_LIMIT - 1]
    column = pack(payload, kept.put, tree=False)
    digest = hashlib.sha256(payload).digest()
    assert column == REF_TAG + digest and kept == {digest: payload}
    assert unpack(column, kept.get) == payload


def test_a_tree_payload_of_any_size_kept_apart_is_compressed() -> None:
    """A step's input just over the inline limit is a tree too: its one piece compressed."""
    for size in (INLINE_LIMIT + 1, CHUNK_LIMIT - 1):
        kept = Kept()
        payload = b"J" + json.dumps(["y" * size]).encode()[:size]
        column = pack(payload, kept.put)
        assert column is not None and column[:1] == REST_TAG
        assert sum(map(len, kept.values())) < len(payload) // 2
        assert unpack(column, kept.get) == payload


def test_random_json_round_trips() -> None:
    rnd = random.Random(7)
    kept = Kept()
    large = 0
    for _ in range(300):
        payload = b"J" + json.dumps(_random_json(rnd), ensure_ascii=False).encode()
        column = pack(payload, kept.put)
        assert column is not None and unpack(column, kept.get) == payload
        large += len(payload) > CHUNK_LIMIT
    assert large > 50
    huge = b"J" + json.dumps(["a" * 100_000, list(range(20_000))]).encode()
    column = pack(huge, kept.put)
    assert column is not None and unpack(column, kept.get) == huge


def test_a_growing_conversation_shares_its_prefix_and_stores_a_few_rows_per_turn() -> None:
    kept = Kept()
    new_rows = []
    for turn in range(20, 81):
        payload = _conversation_payload(turn)
        before = set(kept)
        column = pack(payload, kept.put)
        assert column is not None and len(column) <= INLINE_LIMIT  # the root stays in the row
        assert unpack(column, kept.get) == payload
        new_rows.append(len(set(kept) - before))
    # Two new messages, and the nodes a closed group brings; never the whole list again.
    assert max(new_rows[1:]) <= 8, new_rows
    kept_bytes = sum(len(v) for v in kept.values())
    assert kept_bytes < len(_conversation_payload(80))


def test_payloads_with_a_shared_prefix_share_their_nodes() -> None:
    first, second = Kept(), Kept()
    pack(_conversation_payload(60), first.put)
    pack(_conversation_payload(61), second.put)
    shared = set(first) & set(second)
    nodes = {d for d in shared if first[d][:1] in (NODE_TAG, REST_TAG)}
    assert len(shared) >= 0.9 * len(first) and nodes


def test_pieces_cover_the_payload_exactly_and_a_message_stays_whole() -> None:
    data = json.dumps([{"k": i, "v": "x" * (i % 300)} for i in range(500)]).encode()
    pieces = chunk(data)
    assert b"".join(pieces) == data
    assert max(len(p) for p in pieces) <= 4096
    messages = [
        {"role": "user", "content": f"message {i} " + "lorem ipsum " * 30} for i in range(40)
    ]
    pieces = chunk(json.dumps(messages).encode())
    assert b"".join(pieces) == json.dumps(messages).encode()
    assert all(p.count(b'"role"') == 1 for p in pieces[:-1])
    assert all(len(p) <= 4096 for p in chunk(b'J["' + b"z" * 20_000 + b'"]'))


@pytest.mark.parametrize("inline", [True, False])
def test_flat_manifests_of_older_stores_still_unpack(inline: bool) -> None:
    kept = Kept()
    payload = _conversation_payload(10)
    pieces = [payload[i : i + 1500] for i in range(0, len(payload), 1500)]
    digests = [hashlib.sha256(p).digest() for p in pieces]
    kept.update(zip(digests, pieces, strict=True))
    manifest = b"M" + b"".join(digests[:7] if inline else digests)
    if inline:
        assert unpack(manifest, kept.get) == b"".join(pieces[:7])
    else:
        digest = hashlib.sha256(manifest).digest()
        kept[digest] = manifest
        assert unpack(REF_TAG + digest, kept.get) == payload


def _stored(turns: int) -> tuple[Kept, bytes]:
    kept = Kept()
    column = pack(_conversation_payload(turns), kept.put)
    assert column is not None
    return kept, column


def _damage(kept: Kept, tag: bytes, harm: Callable[[bytes], bytes | None]) -> None:
    digest = next(d for d, v in kept.items() if v[:1] == tag)
    damaged = harm(kept[digest])
    if damaged is None:
        del kept[digest]
    else:
        kept[digest] = damaged


@pytest.mark.parametrize(
    ("tag", "harm", "says"),
    [
        (PIECE, lambda v: None, "is missing"),
        (REST_TAG, lambda v: None, "is missing"),
        (NODE_TAG, lambda v: None, "is missing"),
        (PIECE, lambda v: v[:-3] + b"abc", "is corrupt"),
        (PIECE, lambda v: v[:-3], "is corrupt"),
        (PIECE, lambda v: b"X" + v[1:], "is corrupt"),
        (NODE_TAG, lambda v: v[:-5], "is corrupt"),
        (NODE_TAG, lambda v: v[:-20] + bytes(20), "is corrupt"),
        (REST_TAG, lambda v: v[:2] + b"\x09" + v[3:], "is corrupt"),
    ],
)
def test_a_missing_or_corrupt_piece_raises_corrupt_record(
    tag: bytes, harm: Callable[[bytes], bytes | None], says: str
) -> None:
    kept, column = _stored(120)
    _damage(kept, tag, harm)
    with pytest.raises(CorruptRecord, match=says):
        unpack(column, kept.get)


def test_a_store_that_has_a_node_is_not_asked_for_what_is_below_it() -> None:
    kept, _column = _stored(60)
    asked: list[bytes] = []

    def put(digest: bytes, data: bytes) -> bool:
        asked.append(digest)
        return kept.put(digest, data)

    pack(_conversation_payload(60), put)
    assert len(asked) <= 8


def _unpack_as_release_0_1(
    stored: bytes, get: Callable[[list[bytes]], dict[bytes, bytes]]
) -> bytes:
    """The 0.1 release's reader, verbatim: a reference, then a flat manifest of raw chunks;
    anything else is the payload itself (a tree node would come back as garbage)."""
    if stored[:1] == REF_TAG and len(stored) == 33:
        stored = get([stored[1:]])[stored[1:]]
    if stored[:1] != b"M":
        return stored
    digests = [stored[i : i + 32] for i in range(1, len(stored), 32)]
    found = get(digests)
    return b"".join(found[d] for d in digests)


def test_what_an_older_worker_may_read_is_written_in_the_format_it_reads() -> None:
    """During a rolling deploy a 0.1 worker can continue a run a new worker started: results,
    a run's input and event payloads (``tree=False``) stay flat manifests it reads; only step
    inputs, which no older release decodes while executing, become trees."""
    kept = Kept()
    payload = _conversation_payload(30)
    flat = pack(payload, kept.put, tree=False)
    assert flat is not None
    assert _unpack_as_release_0_1(flat, kept.get) == payload
    assert unpack(flat, kept.get) == payload
    tree = pack(payload, kept.put)
    assert tree is not None and unpack(tree, kept.get) == payload
    assert _unpack_as_release_0_1(tree, kept.get) != payload  # why trees stay off that path


def test_trees_of_32_byte_keys_of_older_stores_still_unpack() -> None:
    """Rows a store kept before trees took 20-byte keys and pieces a preset vocabulary (written
    by that code, kept verbatim in ``data/``) read back as they were written."""
    old = json.loads(OLD_TREES.read_text("utf-8"))
    kept = Kept({bytes.fromhex(k): bytes.fromhex(v) for k, v in old["rows"].items()})
    assert {v[:1] for v in kept.values()} == {b"T", b"Q", b"Z"}
    for turns, column in old["columns"].items():
        assert unpack(bytes.fromhex(column), kept.get) == _conversation_payload(int(turns))
    some_node = next(k for k, v in kept.items() if v[:1] == b"T")
    kept[some_node] = kept[some_node][:-32] + bytes(32)
    with pytest.raises(CorruptRecord, match="is corrupt"):
        for column in old["columns"].values():
            unpack(bytes.fromhex(column), kept.get)


def _reply(turn: int) -> bytes:
    text = f"answer {turn}: " + " ".join(f"w{turn * 7 + i}" for i in range(60))
    return b"J" + json.dumps(text).encode()


def _chat(turns: int) -> bytes:
    messages: list[dict[str, str]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: " + "why? " * 60})
        messages.append({"role": "assistant", "content": json.loads(_reply(i)[1:])})
    return b"J" + json.dumps({"args": [messages], "kwargs": {}}, separators=(",", ":")).encode()


def test_a_message_that_repeats_a_stored_row_costs_a_reference_to_it() -> None:
    """The newest message of a step's input is the last step's result: compressed against that
    row, its piece is a reference and a few bytes, and it reads back only with that row."""
    kept = Kept()
    pack(_chat(20), kept.put)
    reply = _reply(20)
    digest = hashlib.sha256(reply).digest()
    kept.put(digest, reply)
    before = set(kept)
    column = pack(_chat(21), kept.put, dictionary=(digest, reply))
    assert column is not None and column == column_of(_chat(21))
    new = {d: kept[d] for d in set(kept) - before}
    against = [v for v in new.values() if v[:1] == AGAINST]
    assert len(against) == 1 and against[0][1:33] == digest
    assert len(against[0]) < 33 + len(reply) // 4
    assert unpack(column, kept.get) == _chat(21)
    del kept[digest]
    with pytest.raises(CorruptRecord, match=f"{digest.hex()} is missing"):
        unpack(column, kept.get)


def test_the_column_of_a_payload_is_what_pack_stores() -> None:
    for size in (10, INLINE_LIMIT + 1, CHUNK_LIMIT, CHUNK_LIMIT + 1):
        payload = b"J" + json.dumps("x" * size).encode()
        assert column_of(payload) == pack(payload, Kept().put)
    for turns in (8, 60, 400):
        assert column_of(_conversation_payload(turns)) == pack(
            _conversation_payload(turns), Kept().put
        )
