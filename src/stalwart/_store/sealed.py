"""Payloads of an encrypted store: the codec hands the store sealed values (``_keyring``);
one too big to keep in its row is opened here and kept apart as a tree whose pieces and
nodes are each sealed under the current key, keyed by HMAC under the digest key, so the
unchanged prefix of a conversation still shares its pieces. A column keeps either a sealed
value or a reference (``b"H"`` + a keyed digest); no plaintext reaches the SQL. A tree's root
is always kept as a row of its own (a column never seals one), and each sealed row is stored
with the keys it refers to in clear (``garbage.refs_of``), so the collector can prove which
rows no column reaches without opening anything."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from .._errors import EncryptionKeyMissing
from .._keyring import SEALED_TAG, Keyring, key_id_of, seal_text
from .garbage import refs_of
from .payloads import (
    DIGEST_SIZE,
    INLINE_LIMIT,
    MANIFEST_TAG,
    NODE_TAG,
    REF_TAG,
    REST_TAG,
    Decoded,
    Dictionary,
    Get,
    Put,
    column_of,
    pack,
    unpack,
)

__all__ = [
    "SealedPut",
    "column_for",
    "is_kept_apart",
    "is_reference",
    "open_column",
    "opening",
    "pack_sealed",
    "reseal_error",
    "reseal_text",
    "seal_error",
    "sealing",
    "unpacked",
]


# Stores a row: its key, its sealed bytes and what it refers to (``garbage.refs_of``); says
# whether it was new or refreshed, as ``payloads.Put`` does.
SealedPut = Callable[[bytes, bytes, bytes], bool]


def sealing(keyring: Keyring, put: SealedPut) -> Put:
    """``put`` that stores each row sealed, bound to its key, with the keys it refers to."""
    return lambda key, data: put(key, keyring._seal(data, key), refs_of(data))


def opening(keyring: Keyring | None, get: Get, trusted: set[bytes]) -> Get:
    """``get`` that opens sealed rows (adding their keys to ``trusted``)."""

    def fetch(keys: list[bytes]) -> dict[bytes, bytes]:
        found = get(keys)
        for key, data in found.items():
            if data[:1] == SEALED_TAG:
                if keyring is None:
                    raise EncryptionKeyMissing(key_id_of(data) or "?")
                found[key] = keyring._open(data, key)
                trusted.add(key)
        return found

    return fetch


def is_kept_apart(column: bytes) -> bool:
    """Whether a column value stands for a payload kept apart (a reference or a tree's root),
    not the payload itself."""
    return is_reference(column) or _is_root(column)


def is_reference(column: bytes) -> bool:
    """Whether a column value only refers to a row by digest (nothing to seal)."""
    return column[:1] == REF_TAG and len(column) == 1 + DIGEST_SIZE


def _is_root(column: bytes) -> bool:
    return column[:1] in (NODE_TAG, REST_TAG, MANIFEST_TAG)


def pack_sealed(
    keyring: Keyring, sealed: bytes, put: SealedPut, dictionary: Dictionary | None
) -> bytes | None:
    """The column value for the sealed payload ``sealed``, kept apart piece by piece; a tree's
    root small enough to stay in the column is kept as a row too, referred to in clear."""
    sealed_put = sealing(keyring, put)
    column = pack(keyring._open(sealed), sealed_put, dictionary=dictionary, digest=keyring._digest)
    if column is None or is_reference(column):
        return column
    if _is_root(column):
        key = keyring._digest(column)
        sealed_put(key, column)
        return REF_TAG + key
    return keyring._seal(column)


def unpacked(
    keyring: Keyring | None, stored: bytes, get: Get, decoded: Decoded | None = None
) -> bytes:
    """``payloads.unpack`` with sealed columns and rows opened where the keyring can. What
    was sealed comes back sealed (the codec opens it), so a caller that copies a loaded
    payload into another row never writes it in plaintext. ``decoded``: what the read's
    earlier payloads decoded (``payloads.Decoded``)."""
    trusted: set[bytes] = set()
    column = open_column(keyring, stored)
    if column is stored and column[:1] == SEALED_TAG:
        return column  # no keyring or not its key: the codec names the key
    if column is not stored and not is_kept_apart(column):
        return stored  # a sealed value kept in its row
    try:
        payload = unpack(column, opening(keyring, get, trusted), trusted, decoded)
    except EncryptionKeyMissing as missing:
        # a row of the tree is under a key this keyring lacks: the codec names it
        key_id = missing.key_id.encode("ascii", "replace")
        return SEALED_TAG + bytes([len(key_id)]) + key_id
    if keyring is not None and (trusted or column is not stored):
        return keyring._seal(payload)
    return payload


def column_for(payload: bytes, keyring: Keyring | None) -> bytes:
    """The column value the store keeps for encoded ``payload`` (``payloads.column_of``;
    for a sealed payload, what ``pack_sealed`` keeps), computed without storing anything."""
    if keyring is None or payload[:1] != SEALED_TAG:
        return column_of(payload)
    if len(payload) <= INLINE_LIMIT:
        return payload
    column = column_of(keyring._open(payload), keyring._digest)
    if _is_root(column):
        return REF_TAG + keyring._digest(column)
    return column if is_reference(column) else keyring._seal(column)


def open_column(keyring: Keyring | None, column: bytes) -> bytes:
    """A column's value with its seal taken off where the keyring can (else as it is: the
    codec names the missing key when it is decoded)."""
    if keyring is None or column[:1] != SEALED_TAG or key_id_of(column) not in keyring.keys:
        return column
    return keyring._open(column)


def reseal_error(keyring: Keyring, text: str) -> str:
    """An error record's JSON with its message sealed under the current key (opened from
    an older key, or taken as it was written in plaintext)."""
    data = json.loads(text)
    sealed = data.pop("sealed", None)
    if isinstance(sealed, str):
        data["message"] = keyring._open(base64.b64decode(sealed)).decode("utf-8")
    return seal_error(keyring, json.dumps(data))


def reseal_text(keyring: Keyring, text: str) -> str:
    """A text column sealed under the current key (see ``_keyring.seal_text``)."""
    if text.startswith("encrypted (key "):
        text = keyring._open(base64.b64decode(text.partition(") ")[2])).decode("utf-8")
    return seal_text(keyring, text)


def seal_error(keyring: Keyring, text: str) -> str:
    """An error record's JSON with its message sealed: ``message`` says which key, and
    ``sealed`` holds it (base64)."""
    data = json.loads(text)
    message = data.get("message")
    if not isinstance(message, str) or not message or "sealed" in data:
        return text
    data["sealed"] = base64.b64encode(keyring._seal(message.encode("utf-8"))).decode("ascii")
    data["message"] = f"encrypted (key {keyring.current})"
    return json.dumps(data)
