"""Payload packing: inline, by digest, or as content-defined chunks shared across payloads."""

from __future__ import annotations

import json

from stalwart._store.payloads import INLINE_LIMIT, chunk, pack, unpack


def _store() -> tuple[dict[bytes, bytes], object, object]:
    kept: dict[bytes, bytes] = {}

    def put(digest: bytes, data: bytes) -> None:
        kept[digest] = data

    def get(digests: list[bytes]) -> dict[bytes, bytes]:
        return {d: kept[d] for d in digests}

    return kept, put, get


def test_small_payloads_stay_inline() -> None:
    kept, put, _get = _store()
    small = b"J" + b"x" * (INLINE_LIMIT - 1)
    assert pack(small, put) == small and kept == {}  # type: ignore[arg-type]
    assert pack(None, put) is None  # type: ignore[arg-type]


def test_large_payloads_round_trip_and_share_their_prefix_chunks() -> None:
    kept, put, get = _store()
    messages = [
        {"role": "user", "content": f"message {i} " + "lorem ipsum " * 40} for i in range(60)
    ]
    stored = []
    for turn in range(1, 61):
        payload = b"J" + json.dumps({"args": [messages[:turn]], "kwargs": {}}).encode()
        column = pack(payload, put)  # type: ignore[arg-type]
        assert (column is not None and len(column) <= INLINE_LIMIT) or column[:1] == b"H"
        assert unpack(column, get) == payload  # type: ignore[arg-type]
        stored.append(len(payload))
    kept_bytes = sum(len(v) for v in kept.values())
    assert kept_bytes < 0.2 * sum(stored)  # far below storing every payload whole
    assert kept_bytes < 6 * stored[-1]


def test_chunks_cover_the_payload_exactly() -> None:
    data = json.dumps([{"k": i, "v": "x" * (i % 300)} for i in range(500)]).encode()
    pieces = chunk(data)
    assert b"".join(pieces) == data
    assert len(pieces) > 5
    assert max(len(p) for p in pieces) <= 4096 + 400
