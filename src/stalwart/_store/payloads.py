"""How payloads are kept apart from the journal and deduplicated.

A payload up to ``INLINE_LIMIT`` bytes stays in its journal row. A larger one is stored once
under its SHA-256 digest and the row keeps ``b"H" + digest``. A payload over ``CHUNK_LIMIT``
is cut into content-defined chunks, each stored once under its digest, and what is stored under
the payload's reference is a manifest (``b"M"`` + chunk digests). Cuts fall at JSON element
boundaries chosen by a hash of the bytes before them, so the unchanged prefix of a growing
conversation cuts the same way every time and its chunks are shared by every step that received
it: an agent's journal grows with the conversation, not with its square.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable, Iterable

__all__ = ["INLINE_LIMIT", "REF_TAG", "pack", "unpack"]

INLINE_LIMIT = 256
CHUNK_LIMIT = 4096
REF_TAG = b"H"
MANIFEST_TAG = b"M"
_MIN_CHUNK = 1024
_MAX_CHUNK = 4096
_CUT_ONE_IN = 4  # of the eligible boundaries, about one in four becomes a cut
_WINDOW = 48
_BOUNDARY = re.compile(rb"[}\]\"],")


def _cuts(data: bytes) -> Iterable[int]:
    last = 0
    for match in _BOUNDARY.finditer(data):
        pos = match.end()
        size = pos - last
        if size < _MIN_CHUNK:
            continue
        if size >= _MAX_CHUNK or zlib.crc32(data[pos - _WINDOW : pos]) % _CUT_ONE_IN == 0:
            yield pos
            last = pos


def chunk(data: bytes) -> list[bytes]:
    """``data`` cut at content-defined JSON boundaries."""
    pieces, last = [], 0
    for pos in _cuts(data):
        pieces.append(data[last:pos])
        last = pos
    pieces.append(data[last:])
    return pieces


def pack(payload: bytes | None, put: Callable[[bytes, bytes], None]) -> bytes | None:
    """The column value for ``payload``; ``put(digest, data)`` stores what lives apart."""
    if payload is None or len(payload) <= INLINE_LIMIT:
        return payload
    if len(payload) > CHUNK_LIMIT:
        digests = []
        for piece in chunk(payload):
            digest = hashlib.sha256(piece).digest()
            put(digest, piece)
            digests.append(digest)
        payload = MANIFEST_TAG + b"".join(digests)
        if len(payload) <= INLINE_LIMIT:
            return payload
    digest = hashlib.sha256(payload).digest()
    put(digest, payload)
    return REF_TAG + digest


def unpack(stored: bytes, get: Callable[[list[bytes]], dict[bytes, bytes]]) -> bytes:
    """The payload behind a column value; ``get(digests)`` fetches stored pieces.

    Raises ``KeyError`` naming a missing digest.
    """
    if stored[:1] == REF_TAG and len(stored) == 33:
        stored = get([stored[1:]])[stored[1:]]
    if stored[:1] != MANIFEST_TAG:
        return stored
    digests = [stored[i : i + 32] for i in range(1, len(stored), 32)]
    found = get(digests)
    return b"".join(found[d] for d in digests)
