"""Which content-addressed payload rows are garbage, and in which order they may go.

A column refers to a payload row by ``b"H" + digest`` or holds a tree's root inline; a stored
row may refer to others (a tree node to its children, a manifest to its chunks, a piece to the
row it was compressed against). In an encrypted store a sealed row hides what it refers to, so
it lists those keys in clear in its ``refs`` column (keyed digests: nothing secret), written
with it, and a sealed column never holds a tree's root (it refers to it by ``b"H"`` + digest,
in clear). A row is *live* when a column reaches it, or when a writer
stored or found it within the grace window (``touched_at``): such a row is a root of the mark
too, so whatever lies below it is kept with it, though no writer has touched that. What is not
live is swept parents first, in batches, each batch reading its rows' ``touched_at`` again
under lock: a row a writer touched since the mark is kept with everything below it, and a row
deleted before a writer came back to it is stored again by that writer, with its children
(``put_payload`` changes a row it stores or refreshes, and ``pack`` then puts the children in
turn). docs/lifecycle.md ("How garbage is collected safely") gives the whole argument.

Pure functions over digests and row heads: the store reads, this decides.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .payloads import DIGEST_SIZE, NODE_TAG, REF_TAG, REST_TAG

__all__ = [
    "AGAINST_TAG",
    "GRACE_SECONDS",
    "REFRESH_SECONDS",
    "Graph",
    "children_of",
    "listed",
    "referenced_by",
    "refs_of",
]

# A writer refreshes a row it finds stored once its touched_at is older than this.
REFRESH_SECONDS = 600.0
# The collector keeps every row touched within this window: longer than the refresh interval
# plus the longest transaction a writer may hold open. Writers stamp rows by the store's clock,
# the collector's (``stamp_with``), so no machine's own clock enters.
GRACE_SECONDS = 3600.0

_MANIFEST = b"M"
AGAINST_TAG = b"D"  # a piece deflated against another row: b"D" + that row's digest + ...
# Trees of earlier releases: the same shapes with 32-byte keys.
_NODE_WIDTHS = {NODE_TAG: 20, REST_TAG: 20, b"T": DIGEST_SIZE, b"Q": DIGEST_SIZE}
_REST_TAGS = (REST_TAG, b"Q")
# What a payloads row must keep whole for children_of to read it (others: its first bytes).
TREE_TAGS = (*_NODE_WIDTHS, _MANIFEST)
HEAD_SIZE = 1 + DIGEST_SIZE


def _node_children(data: bytes) -> list[bytes]:
    width = _NODE_WIDTHS[data[:1]]
    if data[:1] not in _REST_TAGS:
        return [data[i : i + width] for i in range(2, len(data) - width + 1, width)]
    if len(data) < 4:
        return []
    count, has_up = data[2], data[3]
    start = 4 + width * has_up
    up = [data[4:start]] if has_up else []
    return up + [data[i : i + width] for i in range(start, start + width * count, width)]


def children_of(data: bytes) -> list[bytes]:
    """The keys of the rows a stored row (or an inline root) refers to. A row that only looks
    like a node (a raw chunk of an old manifest) yields keys of rows that may not exist:
    harmless, the mark only keeps more."""
    tag = data[:1]
    if tag in _NODE_WIDTHS:
        return _node_children(data)
    if tag == _MANIFEST:
        return [data[i : i + DIGEST_SIZE] for i in range(1, len(data) - DIGEST_SIZE + 1, 32)]
    if tag == AGAINST_TAG and len(data) >= HEAD_SIZE:
        return [data[1:HEAD_SIZE]]
    return []


def refs_of(data: bytes) -> bytes:
    """What a sealed row's ``refs`` column keeps for the row whose plaintext is ``data``: the
    keys it refers to, each a length byte then the key (keyed digests, nothing secret)."""
    return b"".join(bytes([len(key)]) + key for key in children_of(data))


def listed(refs: bytes) -> list[bytes]:
    """The keys a ``refs`` value lists (``refs_of``'s inverse)."""
    keys, pos = [], 0
    while pos < len(refs):
        end = pos + 1 + refs[pos]
        keys.append(refs[pos + 1 : end])
        pos = end
    return keys


def referenced_by(column: bytes) -> list[bytes]:
    """The payload rows a column value refers to directly."""
    if column[:1] == REF_TAG and len(column) == HEAD_SIZE:
        return [column[1:]]
    if column[:1] in TREE_TAGS:
        return children_of(column)
    return []


@dataclass
class Graph:
    """The payloads table as the mark saw it: each row's children and whether a writer touched
    it within the grace window."""

    children: dict[bytes, list[bytes]] = field(default_factory=dict)
    recent: set[bytes] = field(default_factory=set)

    def add(self, digest: bytes, head: bytes, *, recent: bool, refs: bytes | None = None) -> None:
        """Record a row by its digest and its head (whole for a node, else its first bytes),
        or, for a sealed row, by the keys its ``refs`` lists."""
        self.children[digest] = children_of(head) if refs is None else listed(refs)
        if recent:
            self.recent.add(digest)

    def below(self, roots: Iterable[bytes], seen: set[bytes]) -> set[bytes]:
        """``roots`` and every row they reach, rows in ``seen`` not entered again (added)."""
        todo = [digest for digest in roots if digest not in seen]
        seen.update(todo)
        while todo:
            for child in self.children.get(todo.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return seen

    def garbage(self, references: Iterable[bytes]) -> list[bytes]:
        """The rows neither a reference nor a recent row reaches, parents before children
        (rows on a cycle, which only a row that merely looks like a node can make, are kept)."""
        live = self.below(self.recent, set())
        self.below(references, live)
        dead = [digest for digest in self.children if digest not in live]
        parents = dict.fromkeys(dead, 0)
        for digest in dead:
            for child in self.children[digest]:
                if child in parents:
                    parents[child] += 1
        ready = deque(digest for digest, count in parents.items() if count == 0)
        order = []
        while ready:
            digest = ready.popleft()
            order.append(digest)
            for child in self.children[digest]:
                if child in parents:
                    parents[child] -= 1
                    if parents[child] == 0:
                        ready.append(child)
        return order


def batches(order: list[bytes], size: int) -> Iterator[list[bytes]]:
    """``order`` in consecutive batches of at most ``size``."""
    for start in range(0, len(order), size):
        yield order[start : start + size]
