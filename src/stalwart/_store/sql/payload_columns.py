"""Payload columns of a SQL store: a value over the inline limit is kept apart in ``payloads``
rows (content-addressed, maybe a tree of pieces, maybe sealed) and its column holds a
reference; these read such columns back, in batches, and store new ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..._errors import CorruptRecord
from ..._keyring import SEALED_TAG, Keyring, key_id_of
from .. import garbage
from ..payloads import (
    CHUNK_LIMIT,
    DIGEST_SIZE,
    INLINE_LIMIT,
    MANIFEST_TAG,
    REF_TAG,
    REST_TAG,
    Decoded,
    pack,
)
from ..sealed import pack_sealed, unpacked

__all__ = ["PayloadColumns"]

T = TypeVar("T")

# The first bytes of a column ``sealed.unpacked`` acts on (a reference, a tree's root, of
# 32-byte keys too, a manifest, a seal): any other column is the payload itself.
_KEPT_APART = frozenset({REF_TAG, REST_TAG, b"Q", MANIFEST_TAG, SEALED_TAG})


class _Miss(Exception):
    """A payload piece not read yet (see ``PayloadColumns._load_all``)."""

    def __init__(self, digests: list[bytes]) -> None:
        super().__init__(len(digests))
        self.digests = digests


class PayloadColumns:
    """Storing and loading the payload columns of a SQL store (a mixin of ``SQLBase``)."""

    _q: dict[str, str]
    keyring: Keyring | None = None  # set by the app that opened it with encryption=
    stamp_clock: Callable[[], float] | None = None  # set by the app: see ``stamp_with``

    def _run(self, work: Callable[[Any], T]) -> T:
        raise NotImplementedError  # the backend's read transaction

    def _stash(
        self, conn: Any, payload: bytes | None, *, tree: bool = False, run: str | None = None
    ) -> bytes | None:
        """The column value for ``payload``, storing what lives apart on ``conn``. Only step
        inputs (of run ``run``) and a run's result over 4 KiB (``tree``) are trees, which no
        older worker decodes while it executes a run (see ``payloads``)."""
        if payload is None or len(payload) <= INLINE_LIMIT:
            return payload

        now = time.time() if self.stamp_clock is None else self.stamp_clock()
        stale = now - garbage.REFRESH_SECONDS

        def put(digest: bytes, data: bytes, refs: bytes | None = None) -> bool:
            params = {"digest": digest, "data": data, "now": now, "stale": stale, "refs": refs}
            return bool(conn.execute(self._q["put_payload"], params).rowcount == 1)

        big = len(payload) > CHUNK_LIMIT
        dictionary = _last_result(self, conn, run) if big and run is not None else None
        if self.keyring is not None and payload[:1] == SEALED_TAG:
            return pack_sealed(self.keyring, payload, put, dictionary)
        return pack(payload, put, tree=run is not None or (tree and big), dictionary=dictionary)

    def _fetch_found(self, conn: Any, digests: list[bytes]) -> dict[bytes, bytes]:
        """The stored pieces among ``digests`` (the missing ones left out)."""
        found = {}
        for digest in dict.fromkeys(digests):
            row = conn.execute(self._q["get_payload"], {"digest": digest}).fetchone()
            if row is not None:
                found[digest] = bytes(row[0])
        return found

    def _fetch_on(self, conn: Any, digests: list[bytes]) -> dict[bytes, bytes]:
        found = self._fetch_found(conn, digests)
        for digest in digests:
            if digest not in found:
                raise KeyError(digest.hex())
        return found

    def load_payload(self, stored: bytes, conn: Any = None) -> bytes:
        """The encoded payload behind a stored column value (read on ``conn`` when a
        transaction already holds one, so it never waits for a second connection)."""

        def fetch(digests: list[bytes]) -> dict[bytes, bytes]:
            if conn is not None:
                return self._fetch_on(conn, digests)
            return self._run(lambda c: self._fetch_on(c, digests))

        return self._unpack(bytes(stored), fetch)

    def _unpack(
        self,
        stored: bytes,
        get: Callable[[list[bytes]], dict[bytes, bytes]],
        decoded: Decoded | None = None,
    ) -> bytes:
        """``unpack``, sealed columns and rows opened (see ``sealed.unpacked``)."""
        return unpacked(self.keyring, stored, get, decoded)

    def _loaded(self, stored: bytes | None) -> bytes | None:
        """``load_payload`` for a column that may be empty."""
        return None if stored is None else self.load_payload(bytes(stored))

    def _rows_below(
        self, conn: Any, digests: list[bytes], leaves: set[bytes]
    ) -> dict[bytes, bytes]:
        """The stored rows among ``digests``, with any rows below those not in ``leaves``
        that the store reads in the same statement (here none: a read per level)."""
        return self._fetch_found(conn, digests)

    def _reached(self, conn: Any, columns: list[bytes | None]) -> dict[bytes, bytes | None]:
        """Every payloads row the columns reach (``None`` for a key not stored), as
        ``garbage.children_of`` reads them: nodes, manifests, and the row a piece was
        deflated against, which is read but not walked. The columns' own references are
        read plainly, then the rows below them a level a statement, or all in one where the
        store reads a tree at once (most of the first are an inline root's pieces, leaves
        such a read would fetch twice). A sealed row hides its children: what lies below one
        is left to ``_load_all``'s rounds."""
        known: dict[bytes, bytes | None] = {}
        walked: set[bytes] = set()
        level = [(key, True) for c in columns if c is not None for key in garbage.referenced_by(c)]
        first = True
        while level:
            if missing := list(dict.fromkeys(key for key, _ in level if key not in known)):
                known.update(dict.fromkeys(missing))
                if first:
                    known.update(self._fetch_found(conn, missing))
                else:
                    leaves = {key for key, walk in level if not walk}
                    leaves -= {key for key, walk in level if walk}
                    known.update(self._rows_below(conn, missing, leaves))
            first = False
            below: list[tuple[bytes, bool]] = []
            for key, walk in level:
                data = known[key]
                if walk and data is not None and key not in walked:
                    walked.add(key)
                    dictionary = data[:1] == garbage.AGAINST_TAG
                    below += [(child, not dictionary) for child in garbage.children_of(data)]
            level = below
        return known

    def _load_all(
        self,
        conn: Any,
        columns: list[bytes | None],
        named: Callable[[int, CorruptRecord], CorruptRecord] = lambda _i, exc: exc,
    ) -> list[bytes | None]:
        """``_loaded`` of many columns read on ``conn``: every row they reach is read first
        (``_reached``: a read per level of the deepest tree, or one), then each payload is
        put together, a piece met in several (the unchanged prefix of a conversation) read
        and inflated once; what a sealed row hid is read in further rounds, each fetching
        what every unfinished payload needs next in one batch. A column that cannot be
        resolved raises ``named(its index, the CorruptRecord)``."""
        columns = [None if column is None else bytes(column) for column in columns]
        known = self._reached(conn, columns)
        decoded = Decoded()

        def cached(digests: list[bytes]) -> dict[bytes, bytes]:
            if missing := [digest for digest in digests if digest not in known]:
                raise _Miss(missing)
            found = {digest: known[digest] for digest in digests}
            for digest, data in found.items():
                if data is None:
                    raise KeyError(digest)
            return cast(dict[bytes, bytes], found)

        out: list[Any] = list(columns)
        todo = [i for i, c in enumerate(columns) if c is not None and c[:1] in _KEPT_APART]
        while todo:
            wanted: dict[bytes, None] = {}
            waiting = []
            for i in todo:
                try:
                    out[i] = self._unpack(columns[i], cached, decoded)  # type: ignore[arg-type]
                except _Miss as miss:
                    wanted.update(dict.fromkeys(miss.digests))
                    waiting.append(i)
                except CorruptRecord as exc:
                    raise named(i, exc) from exc
            if wanted:
                found = self._fetch_found(conn, list(wanted))
                known.update({digest: found.get(digest) for digest in wanted})
            todo = waiting
        return out


def _last_result(base: PayloadColumns, conn: Any, workflow_id: str) -> tuple[bytes, bytes] | None:
    """The payloads row of the run's last step result kept apart (its digest and bytes)."""
    row = conn.execute(base._q["last_step_result"], {"workflow_id": workflow_id}).fetchone()
    stored = None if row is None or row[0] is None else bytes(row[0])
    if stored is None or stored[:1] != REF_TAG or len(stored) != 1 + DIGEST_SIZE:
        return None
    key = stored[1:]
    found = base._fetch_found(conn, [key])
    if key not in found:
        return None
    data = found[key]
    if base.keyring is not None and data[:1] == SEALED_TAG:
        if key_id_of(data) not in base.keyring.keys:
            return None  # under a key this keyring lacks: compress without it
        data = base.keyring._open(data, key)
    return (key, data)
