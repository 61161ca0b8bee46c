"""How payloads are kept apart from the journal and deduplicated.

A payload up to ``INLINE_LIMIT`` bytes stays in its journal row. A larger one is stored once
under its SHA-256 digest and the row keeps ``b"H" + digest``. A payload over ``CHUNK_LIMIT``
is cut into *pieces* at JSON element ends, about one element each (a message of a
conversation stays whole), and the pieces are the leaves of a content-addressed tree: a node
(``b"V"`` + its level + up to ``_MAX_CHILDREN`` keys) lists pieces or lower nodes, and a node
ends after a child whose key says so. Cuts and node ends depend only on the bytes before
them, so the unchanged prefix of a growing conversation yields the same pieces and the same
nodes every time: each new step stores its new pieces, compressed, and the few nodes on the
tree's right edge, not a list of everything before. The row keeps the root node (inline when
it is small, else by reference).

A piece may be compressed against a *dictionary*: another row of the payloads table the
writer names (``b"D"`` + its digest + raw deflate with that row's bytes as the preset
dictionary). The writer of a step's input passes the run's last step result, which the new
part of a conversation repeats (the model's reply is the next input's newest message), so that
message costs a reference and a few bytes instead of a second compressed copy; the dictionary
is a plain row, never a piece, so decoding one piece needs at most one more row.

Rows written before trees existed still read back: a manifest (``b"M"`` + the digests of raw
chunks) is resolved as it always was; so do trees of 32-byte keys (``b"T"``, ``b"Q"``) and
pieces deflated alone (``b"Z"``).
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable, Iterator

from .._errors import CorruptRecord

__all__ = [
    "CHUNK_LIMIT",
    "DIGEST_SIZE",
    "INLINE_LIMIT",
    "NODE_TAG",
    "REF_TAG",
    "REST_TAG",
    "Decoded",
    "chunk",
    "column_of",
    "pack",
    "unpack",
]

INLINE_LIMIT = 256
CHUNK_LIMIT = 4096
REF_TAG = b"H"
MANIFEST_TAG = b"M"  # the flat manifest every release reads (written with tree=False)
NODE_TAG = b"V"
REST_TAG = b"U"
# Trees of earlier releases: the same shapes with 32-byte keys (they still read).
_LONG_NODE = b"T"
_LONG_REST = b"Q"
_DEFLATED = b"Z"
_RAW = b"R"
_STATIC = b"S"  # raw deflate with _VOCABULARY as its preset dictionary
_AGAINST = b"D"  # the same, a stored row's bytes added to the dictionary
# What the messages of a conversation with a model repeat, as JSON writes them: a preset
# dictionary spares each piece the words its first occurrence would cost (never change it:
# stored pieces are inflated with it; a new one takes a new tag).
_VOCABULARY = (
    b'{"role":"system","content":"{"role":"tool","tool_call_id":"call_","name":"'
    b'"tool_calls":[{"id":"call_","type":"function","function":{"name":"","arguments":"{\\"'
    b'{"role":"assistant","content":null,{"role":"assistant","content":"'
    b'{"role":"user","content":"'
)
_WINDOW = 32768  # what deflate looks back at
# A piece is keyed by the digest of its uncompressed bytes under this prefix, so its key is
# known without compressing it, and no raw chunk of an older store has the same key.
_PIECE_DOMAIN = b"stalwart piece\n"
_MIN_PIECE = 256
_MAX_PIECE = 4096
_FANOUT = 4  # a node ends after about one child in four
_MAX_CHILDREN = 32
_DIGEST = 32
DIGEST_SIZE = _DIGEST  # the length of the digest a column refers to a row by
# A tree's pieces and nodes are keyed by the first 20 bytes of their SHA-256 (160 bits, as
# git's object names): the keys are most of what a tree adds to each step.
_KEY = 20
_WIDTH = {NODE_TAG: _KEY, REST_TAG: _KEY, _LONG_NODE: _DIGEST, _LONG_REST: _DIGEST}
_REST_OF = {NODE_TAG: REST_TAG, _LONG_NODE: _LONG_REST}
_NODE_OF = {REST_TAG: NODE_TAG, _LONG_REST: _LONG_NODE}
# The end of a JSON element: a closing quote or bracket before a comma or another closer.
_ELEMENT_END = re.compile(rb"[\"}\]](?=[,}\]])")

Put = Callable[[bytes, bytes], bool]
Hash = Callable[[bytes], bytes]  # SHA-256, or HMAC-SHA256 under a keyring's digest key
Get = Callable[[list[bytes]], dict[bytes, bytes]]
Dictionary = tuple[bytes, bytes]  # a stored row's digest and its bytes


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


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _piece_key(piece: bytes, width: int = _KEY, digest: Hash = _sha256) -> bytes:
    return digest(_PIECE_DOMAIN + piece)[:width]


def _key(node: bytes, digest: Hash = _sha256) -> bytes:
    return digest(node)[:_KEY]


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

    The pieces' keys are grouped into nodes (``b"V"``) where a content-defined end closes a
    group, and those nodes' keys are grouped the same way a level up. What no end has
    closed yet at a level is listed in a *rest* node (``b"U"``) of that level, which refers
    to the rest node a level up; the root is the rest node of level 0, with the payload's
    short last piece inline. A group closes once and is never rewritten, and a rest node
    changes only when a group below it closes, so a payload that grew at its end shares
    everything but its root and a node or two with the one before it."""

    def __init__(self, payload: bytes, digest: Hash = _sha256) -> None:
        pieces = chunk(payload)
        tail = pieces.pop() if len(pieces[-1]) < _MIN_PIECE else b""
        keys = [_piece_key(piece, _KEY, digest) for piece in pieces]
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
                key = _key(node, digest)
                self.nodes[key] = node
                keys.append(key)
            level += 1
        up: bytes | None = None
        for level, rest in reversed(rests[1:]):
            node = _rest(level, up, rest)
            up = _key(node, digest)
            self.nodes[up] = node
        self.root = _rest(0, up, rests[0][1], tail)

    def store_below(self, node: bytes, put: Put, dictionary: Dictionary | None = None) -> None:
        """Store what ``node`` refers to, skipping what the store already had."""
        up, keys, _tail = _parts(node)
        for key in keys if up is None else [up, *keys]:
            if node[1] == 0 and key != up:
                put(key, _compressed(self.pieces[key], dictionary))
            elif put(key, self.nodes[key]):
                self.store_below(self.nodes[key], put, dictionary)


def _preset(row: bytes = b"") -> bytes:
    return (_VOCABULARY + row)[-_WINDOW:]


def _deflate(data: bytes, dictionary: bytes) -> bytes:
    # the smallest window that sees the whole dictionary: a small one is much cheaper to set
    # up, and an inflater with the largest window reads what any window wrote
    bits = min(15, max(9, (len(dictionary) + len(data)).bit_length()))
    packer = zlib.compressobj(6, zlib.DEFLATED, -bits, 8, zlib.Z_DEFAULT_STRATEGY, dictionary)
    return packer.compress(data) + packer.flush()


def _inflate(data: bytes, dictionary: bytes) -> bytes:
    unpacker = zlib.decompressobj(-15, dictionary)
    piece = unpacker.decompress(data) + unpacker.flush()
    if not unpacker.eof:
        raise zlib.error("the stream is cut short")
    return piece


def _compressed(piece: bytes, dictionary: Dictionary | None) -> bytes:
    """A piece as its row keeps it: the smallest of raw, deflated against the vocabulary, and
    deflated against the vocabulary and ``dictionary``."""
    forms = [_RAW + piece, _STATIC + _deflate(piece, _preset())]
    if dictionary is not None and dictionary[1]:
        key, data = dictionary
        forms.append(_AGAINST + key + _deflate(piece, _preset(data)))
    return min(forms, key=len)


def pack(
    payload: bytes | None,
    put: Put,
    *,
    tree: bool = True,
    dictionary: Dictionary | None = None,
    digest: Hash = _sha256,
) -> bytes | None:
    """The column value for ``payload``; ``put(digest, data)`` stores what lives apart and says
    whether it was new (``False``: the store already had it). The new pieces of a tree may be
    compressed against ``dictionary`` (a stored row: its digest and bytes).

    With ``tree=False`` a payload is kept whole under its digest, or over ``CHUNK_LIMIT`` as
    the flat manifest of earlier releases, which they can still read: for the values an older
    worker may decode while it executes a run (results, a run's input, event payloads) during
    a rolling deploy. With ``tree=True`` every payload kept apart is a tree, so its pieces are
    compressed and shared from the first one (a conversation's first turns too). ``digest``
    computes the keys (HMAC under a keyring's digest key for an encrypted store)."""
    if payload is None or len(payload) <= INLINE_LIMIT:
        return payload
    if len(payload) > CHUNK_LIMIT and not tree:
        digests = []
        for piece in chunk(payload):
            flat = hashlib.sha256(piece).digest()
            put(flat, piece)
            digests.append(flat)
        payload = MANIFEST_TAG + b"".join(digests)
        if len(payload) <= INLINE_LIMIT:
            return payload
    if not tree:
        whole = hashlib.sha256(payload).digest()
        put(whole, payload)
        return REF_TAG + whole
    built = _Tree(payload, digest)
    if len(built.root) <= INLINE_LIMIT:
        built.store_below(built.root, put, dictionary)
        return built.root
    key = digest(built.root)
    if put(key, built.root):
        built.store_below(built.root, put, dictionary)
    return REF_TAG + key


def column_of(payload: bytes, digest: Hash = _sha256) -> bytes:
    """The column value ``pack(payload, put, tree=True)`` stores, computed without storing or
    compressing anything: a key for the payload as a row keeps it."""
    if len(payload) <= INLINE_LIMIT:
        return payload
    root = _Tree(payload, digest).root
    return root if len(root) <= INLINE_LIMIT else REF_TAG + digest(root)


def _parts(node: bytes) -> tuple[bytes | None, list[bytes], bytes]:
    """A node's reference up (rest nodes only), its children, and its inline tail."""
    width = _WIDTH[node[:1]]
    if node[:1] in _REST_OF:
        return None, [node[i : i + width] for i in range(2, len(node), width)], b""
    count, start = node[2], 4 + width * node[3]
    up = node[4:start] if node[3] else None
    end = start + width * count
    return up, [node[i : i + width] for i in range(start, end, width)], node[end:]


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


class Decoded:
    """What one read of many payloads has decoded so far, by key: the pieces, inflated and
    checked (a conversation's journal repeats its earlier pieces in every step's input: each
    is inflated once a read, not once a step), and the nodes whose digest was checked. Keys
    name contents, so within one read a key decodes to the same bytes wherever it is met; a
    read that opened a sealed row for a key trusts that key again where it meets it again."""

    __slots__ = ("checked", "pieces", "trusted")

    def __init__(self) -> None:
        self.pieces: dict[bytes, bytes] = {}
        self.checked: set[bytes] = set()
        self.trusted: set[bytes] = set()  # pieces whose rows were sealed (see ``unpack``)


def _checked(
    key: bytes,
    node: bytes,
    tag: bytes,
    level: int,
    *,
    root: bool = False,
    trusted: frozenset[bytes] | set[bytes] = frozenset(),
    decoded: Decoded | None = None,
) -> bytes:
    """``node`` if it is a well-formed node of kind ``tag`` and ``level`` stored under ``key``
    (the root is not stored under a key of its own when it is inline)."""
    if node[:1] != tag:
        raise _corrupt(key, f"not a {tag!r} node")
    width = _WIDTH[tag]
    if tag in _REST_OF:
        size = len(node) - 2
        whole = size >= width and size % width == 0
    elif len(node) < 4 or node[3] > 1:
        whole = False
    else:
        size = 4 + width * (node[2] + node[3])
        whole = len(node) == size or (root and len(node) > size)
    if not whole:
        raise _corrupt(key, "cut short or malformed")
    if node[1] != level:
        raise _corrupt(key, f"a node of level {node[1]} where level {level} belongs")
    if root or key in trusted or (decoded is not None and key in decoded.checked):
        return node
    if hashlib.sha256(node).digest()[: len(key)] != key:
        raise _corrupt(key, "its digest does not match")
    if decoded is not None:
        decoded.checked.add(key)
    return node


def _dictionary_of(stored: bytes) -> bytes | None:
    """The digest of the row a piece was compressed against, if it was."""
    return stored[1 : 1 + _DIGEST] if stored[:1] == _AGAINST else None


def _checked_piece(
    key: bytes, stored: bytes, dictionaries: dict[bytes, bytes], trusted: set[bytes]
) -> bytes:
    tag, body = stored[:1], stored[1:]
    if tag in (_DEFLATED, _STATIC, _AGAINST):
        try:
            if tag == _DEFLATED:
                piece = zlib.decompress(body)
            elif tag == _STATIC:
                piece = _inflate(body, _preset())
            else:
                piece = _inflate(body[_DIGEST:], _preset(dictionaries[body[:_DIGEST]]))
        except zlib.error as exc:
            raise _corrupt(key, f"it does not inflate: {exc}") from None
    elif tag == _RAW:
        piece = body
    else:
        raise _corrupt(key, f"unknown piece tag {tag!r}")
    if key not in trusted and _piece_key(piece, len(key)) != key:
        raise _corrupt(key, "its digest does not match")
    return piece


def _expand(rest: bytes, get: Get, trusted: set[bytes], decoded: Decoded) -> list[bytes]:
    """The keys a rest node stands for at its level, in order (one fetch for each level up
    and one for each level down)."""
    up, keys, _tail = _parts(rest)
    if up is None:
        return keys
    level, tag = rest[1], rest[:1]
    above = _checked(up, _fetch(get, [up])[up], tag, level + 1, trusted=trusted, decoded=decoded)
    groups = _expand(above, get, trusted, decoded)
    found = _fetch(get, groups)
    below = []
    for g in groups:
        node = _checked(g, found[g], _NODE_OF[tag], level, trusted=trusted, decoded=decoded)
        below += _parts(node)[1]
    return below + keys


def _unpack_tree(root: bytes, get: Get, trusted: set[bytes], decoded: Decoded) -> bytes:
    _checked(b"", root, root[:1], 0, root=True)
    keys = _expand(root, get, trusted, decoded)
    done = decoded.pieces
    if new := [key for key in dict.fromkeys(keys) if key not in done]:
        found = _fetch(get, new)
        wanted = {d for d in map(_dictionary_of, found.values()) if d is not None}
        dictionaries = _fetch(get, sorted(wanted)) if wanted else {}
        for key in new:
            done[key] = _checked_piece(key, found[key], dictionaries, trusted)
        decoded.trusted |= trusted.intersection(new)
    # a piece met before was fetched, and opened if sealed, by an earlier payload of the read
    trusted |= decoded.trusted.intersection(keys)
    return b"".join([done[key] for key in keys]) + _parts(root)[2]


def unpack(
    stored: bytes, get: Get, trusted: set[bytes] | None = None, decoded: Decoded | None = None
) -> bytes:
    """The payload behind a column value; ``get(digests)`` fetches stored pieces.

    ``trusted`` holds the keys of rows ``get`` decrypted (their authentication tag proved
    them, so their keyed digests are not recomputed). ``decoded`` carries what earlier
    payloads of the same read decoded (every ``get`` of the read returning the same rows).
    Raises ``CorruptRecord`` naming a piece that is missing or does not decode.
    """
    trusted = set() if trusted is None else trusted
    decoded = Decoded() if decoded is None else decoded
    if stored[:1] == REF_TAG and len(stored) == 1 + _DIGEST:
        key = stored[1:]
        stored = _fetch(get, [key])[key]
        if stored[:1] in _NODE_OF and key not in trusted and hashlib.sha256(stored).digest() != key:
            raise _corrupt(key, "its digest does not match")
    if stored[:1] in _NODE_OF:
        return _unpack_tree(stored, get, trusted, decoded)
    if stored[:1] != MANIFEST_TAG:
        return stored
    digests = [stored[i : i + _DIGEST] for i in range(1, len(stored), _DIGEST)]
    found = _fetch(get, digests)
    return b"".join(found[d] for d in digests)
