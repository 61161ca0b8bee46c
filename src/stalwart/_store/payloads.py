"""How payloads are kept apart from the journal and deduplicated.

A payload up to ``INLINE_LIMIT`` bytes stays in its journal row. A larger one is stored once
under its SHA-256 digest and the row keeps ``b"H" + digest``. A payload over ``CHUNK_LIMIT``
is cut into *pieces* at JSON element ends, about one element each (a message of a
conversation stays whole), and the pieces are the leaves of a content-addressed tree: a node
(``b"T"`` + its level + up to ``_MAX_CHILDREN`` digests) lists pieces or lower nodes, and a node
ends after a child whose digest says so. Cuts and node ends depend only on the bytes before
them, so the unchanged prefix of a growing conversation yields the same pieces and the same
nodes every time: each new step stores its new pieces, compressed, and the few nodes on the
tree's right edge, not a list of everything before. The row keeps the root node (inline when
it is small, else by reference).

Rows written before trees existed still read back: a manifest (``b"M"`` + the digests of raw
chunks) is resolved as it always was.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable, Iterator

from .._errors import CorruptRecord

__all__ = [
    "CHUNK_LIMIT",
    "INLINE_LIMIT",
    "NODE_TAG",
    "REF_TAG",
    "REST_TAG",
    "chunk",
    "column_of",
    "pack",
    "unpack",
]

INLINE_LIMIT = 256
CHUNK_LIMIT = 4096
REF_TAG = b"H"
MANIFEST_TAG = b"M"  # the flat manifest every release reads (written with tree=False)
NODE_TAG = b"T"
REST_TAG = b"Q"
_DEFLATED = b"Z"
_RAW = b"R"
# A piece is keyed by the digest of its uncompressed bytes under this prefix, so its key is
# known without compressing it, and no raw chunk of an older store has the same key.
_PIECE_DOMAIN = b"stalwart piece\n"
_MIN_PIECE = 256
_MAX_PIECE = 4096
_FANOUT = 4  # a node ends after about one child in four
_MAX_CHILDREN = 32
_DIGEST = 32
# The end of a JSON element: a closing quote or bracket before a comma or another closer.
_ELEMENT_END = re.compile(rb"[\"}\]](?=[,}\]])")

Put = Callable[[bytes, bytes], bool]
Get = Callable[[list[bytes]], dict[bytes, bytes]]


def _cuts(data: bytes) -> Iterator[int]:
    last = 0
    for match in _ELEMENT_END.finditer(data):
        pos = match.end()
        while pos - last > _MAX_PIECE:  # a long string: cut it where it gets too long
            last += _MAX_PIECE
            yield last
        if pos - last < _MIN_PIECE:
            continue
        if data[pos : pos + 1] == b"}":
            pos += 1  # the object closes right here: keep it whole
        yield pos
        last = pos
    while len(data) - last > _MAX_PIECE:
        last += _MAX_PIECE
        yield last


def chunk(data: bytes) -> list[bytes]:
    """``data`` cut into pieces at JSON element ends (each at least ``_MIN_PIECE`` bytes but
    the last, none over ``_MAX_PIECE``)."""
    pieces, last = [], 0
    for pos in _cuts(data):
        pieces.append(data[last:pos])
        last = pos
    if last < len(data):
        pieces.append(data[last:])
    return pieces


def _piece_key(piece: bytes) -> bytes:
    return hashlib.sha256(_PIECE_DOMAIN + piece).digest()


def _node(level: int, children: list[bytes]) -> bytes:
    return NODE_TAG + bytes([level]) + b"".join(children)


def _split(keys: list[bytes]) -> tuple[list[list[bytes]], list[bytes]]:
    """``keys`` as the groups a content-defined end closes, and the open rest."""
    groups: list[list[bytes]] = []
    group: list[bytes] = []
    for key in keys:
        group.append(key)
        if key[0] % _FANOUT == 0 or len(group) == _MAX_CHILDREN:
            groups.append(group)
            group = []
    return groups, group


def _rest(level: int, up: bytes | None, keys: list[bytes], tail: bytes = b"") -> bytes:
    head = REST_TAG + bytes([level, len(keys), up is not None])
    return head + (up or b"") + b"".join(keys) + tail


class _Tree:
    """The pieces and nodes of one payload.

    The pieces' digests are grouped into nodes (``b"T"``) where a content-defined end closes a
    group, and those nodes' digests are grouped the same way a level up. What no end has
    closed yet at a level is listed in a *rest* node (``b"Q"``) of that level, which refers
    to the rest node a level up; the root is the rest node of level 0, with the payload's
    short last piece inline. A group closes once and is never rewritten, and a rest node
    changes only when a group below it closes, so a payload that grew at its end shares
    everything but its root and a node or two with the one before it."""

    def __init__(self, payload: bytes) -> None:
        pieces = chunk(payload)
        tail = pieces.pop() if len(pieces[-1]) < _MIN_PIECE else b""
        keys = [_piece_key(piece) for piece in pieces]
        self.pieces = dict(zip(keys, pieces, strict=True))
        self.nodes: dict[bytes, bytes] = {}
        rests: list[tuple[int, list[bytes]]] = []
        level = 0
        while True:
            groups, rest = _split(keys)
            rests.append((level, rest))
            if not groups:
                break
            keys = []
            for group in groups:
                node = _node(level, group)
                key = hashlib.sha256(node).digest()
                self.nodes[key] = node
                keys.append(key)
            level += 1
        up: bytes | None = None
        for level, rest in reversed(rests[1:]):
            node = _rest(level, up, rest)
            up = hashlib.sha256(node).digest()
            self.nodes[up] = node
        self.root = _rest(0, up, rests[0][1], tail)

    def store_below(self, node: bytes, put: Put) -> None:
        """Store what ``node`` refers to, skipping what the store already had."""
        up, keys, _tail = _parts(node)
        for key in keys if up is None else [up, *keys]:
            if node[1] == 0 and key != up:
                piece = self.pieces[key]
                packed = zlib.compress(piece)
                put(key, _DEFLATED + packed if len(packed) < len(piece) else _RAW + piece)
            elif put(key, self.nodes[key]):
                self.store_below(self.nodes[key], put)


def pack(payload: bytes | None, put: Put, *, tree: bool = True) -> bytes | None:
    """The column value for ``payload``; ``put(digest, data)`` stores what lives apart and says
    whether it was new (``False``: the store already had it).

    With ``tree=False`` a payload over ``CHUNK_LIMIT`` is kept as the flat manifest of earlier
    releases, which they can still read: for the values an older worker may decode while it
    executes a run (results, a run's input, event payloads) during a rolling deploy."""
    if payload is None or len(payload) <= INLINE_LIMIT:
        return payload
    if len(payload) > CHUNK_LIMIT and not tree:
        digests = []
        for piece in chunk(payload):
            digest = hashlib.sha256(piece).digest()
            put(digest, piece)
            digests.append(digest)
        payload = MANIFEST_TAG + b"".join(digests)
        if len(payload) <= INLINE_LIMIT:
            return payload
    if len(payload) <= CHUNK_LIMIT or not tree:
        digest = hashlib.sha256(payload).digest()
        put(digest, payload)
        return REF_TAG + digest
    built = _Tree(payload)
    if len(built.root) <= INLINE_LIMIT:
        built.store_below(built.root, put)
        return built.root
    digest = hashlib.sha256(built.root).digest()
    if put(digest, built.root):
        built.store_below(built.root, put)
    return REF_TAG + digest


def column_of(payload: bytes) -> bytes:
    """The column value ``pack(payload, put, tree=True)`` stores, computed without storing or
    compressing anything: a key for the payload as a row keeps it."""
    if len(payload) <= INLINE_LIMIT:
        return payload
    if len(payload) <= CHUNK_LIMIT:
        return REF_TAG + hashlib.sha256(payload).digest()
    root = _Tree(payload).root
    return root if len(root) <= INLINE_LIMIT else REF_TAG + hashlib.sha256(root).digest()


def _parts(node: bytes) -> tuple[bytes | None, list[bytes], bytes]:
    """A node's reference up (rest nodes only), its children, and its inline tail."""
    if node[:1] == NODE_TAG:
        return None, [node[i : i + _DIGEST] for i in range(2, len(node), _DIGEST)], b""
    count, start = node[2], 4 + _DIGEST * node[3]
    up = node[4:start] if node[3] else None
    end = start + _DIGEST * count
    return up, [node[i : i + _DIGEST] for i in range(start, end, _DIGEST)], node[end:]


def _corrupt(key: bytes, why: str) -> CorruptRecord:
    return CorruptRecord(f"payload piece {key.hex()} is corrupt ({why})")


def _fetch(get: Get, keys: list[bytes]) -> dict[bytes, bytes]:
    try:
        found = get(keys)
    except KeyError as exc:
        missing = exc.args[0] if exc.args else "?"
        name = missing.hex() if isinstance(missing, bytes) else str(missing)
        raise CorruptRecord(f"payload piece {name} is missing from the store") from None
    for key in keys:
        if key not in found:
            raise CorruptRecord(f"payload piece {key.hex()} is missing from the store")
    return found


def _checked(key: bytes, node: bytes, tag: bytes, level: int, *, root: bool = False) -> bytes:
    """``node`` if it is a well-formed node of kind ``tag`` and ``level`` stored under ``key``
    (the root is not stored under a key of its own when it is inline)."""
    if node[:1] != tag:
        raise _corrupt(key, f"not a {tag!r} node")
    if tag == NODE_TAG:
        size = len(node) - 2
        whole = size >= _DIGEST and size % _DIGEST == 0
    elif len(node) < 4 or node[3] > 1:
        whole = False
    else:
        size = 4 + _DIGEST * (node[2] + node[3])
        whole = len(node) == size or (root and len(node) > size)
    if not whole:
        raise _corrupt(key, "cut short or malformed")
    if node[1] != level:
        raise _corrupt(key, f"a node of level {node[1]} where level {level} belongs")
    if not root and hashlib.sha256(node).digest() != key:
        raise _corrupt(key, "its digest does not match")
    return node


def _checked_piece(key: bytes, stored: bytes) -> bytes:
    tag, body = stored[:1], stored[1:]
    if tag == _DEFLATED:
        try:
            piece = zlib.decompress(body)
        except zlib.error as exc:
            raise _corrupt(key, f"it does not inflate: {exc}") from None
    elif tag == _RAW:
        piece = body
    else:
        raise _corrupt(key, f"unknown piece tag {tag!r}")
    if _piece_key(piece) != key:
        raise _corrupt(key, "its digest does not match")
    return piece


def _expand(rest: bytes, get: Get) -> list[bytes]:
    """The keys a rest node stands for at its level, in order (one fetch for each level up
    and one for each level down)."""
    up, keys, _tail = _parts(rest)
    if up is None:
        return keys
    level = rest[1]
    groups = _expand(_checked(up, _fetch(get, [up])[up], REST_TAG, level + 1), get)
    found = _fetch(get, groups)
    below = [k for g in groups for k in _parts(_checked(g, found[g], NODE_TAG, level))[1]]
    return below + keys


def _unpack_tree(root: bytes, get: Get) -> bytes:
    _checked(b"", root, REST_TAG, 0, root=True)
    keys = _expand(root, get)
    found = _fetch(get, keys)
    return b"".join(_checked_piece(key, found[key]) for key in keys) + _parts(root)[2]


def unpack(stored: bytes, get: Get) -> bytes:
    """The payload behind a column value; ``get(digests)`` fetches stored pieces.

    Raises ``CorruptRecord`` naming a piece that is missing or does not decode.
    """
    if stored[:1] == REF_TAG and len(stored) == 1 + _DIGEST:
        key = stored[1:]
        stored = _fetch(get, [key])[key]
        if stored[:1] == REST_TAG and hashlib.sha256(stored).digest() != key:
            raise _corrupt(key, "its digest does not match")
    if stored[:1] == REST_TAG:
        return _unpack_tree(stored, get)
    if stored[:1] != MANIFEST_TAG:
        return stored
    digests = [stored[i : i + _DIGEST] for i in range(1, len(stored), _DIGEST)]
    found = _fetch(get, digests)
    return b"".join(found[d] for d in digests)
