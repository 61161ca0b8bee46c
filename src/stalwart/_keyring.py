"""Encryption at rest: the keyring and the sealed form of a payload.

A sealed value is ``b"E"`` + the length of its key id + the key id + a 12-byte nonce + the
AES-256-GCM ciphertext and tag. The nonce is the HMAC of the plaintext under the digest key,
so equal values sealed under one key are equal bytes (content addressing still finds them)
and no two different values share a nonce. Digests that address content are HMAC-SHA256
under the digest key, which does not rotate with the encryption keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import CorruptRecord, EncryptionKeyMissing, StoreError, UsageError

__all__ = ["SEALED_TAG", "Keyring", "key_id_of", "new_key_text", "open_text", "seal_text", "shown"]

SEALED_TAG = b"E"
_NONCE = 12
_REMEMBERED = 4096  # digests a keyring remembers (pieces are at most 4 KiB)
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ENV_KEYS = "STALWART_ENCRYPTION_KEYS"
_ENV_DIGEST = "STALWART_DIGEST_KEY"
_DIGEST_INFO = b"stalwart digest key\n"


def _key_bytes(key: bytes | str, what: str) -> bytes:
    if isinstance(key, str):
        try:
            key = base64.b64decode(key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise UsageError(
                f"{what} is not base64 text: pass 32 bytes, or the base64 of 32 bytes "
                "(`stalwart keygen` prints one)"
            ) from None
    if not isinstance(key, bytes) or len(key) != 32:
        size = len(key) if isinstance(key, bytes) else type(key).__name__
        raise UsageError(f"{what} is {size} bytes: AES-256 needs 32 (`stalwart keygen` prints one)")
    return key


class _NoTag(Exception):
    """Stands for ``InvalidTag`` where cryptography is not installed."""


try:
    from cryptography.exceptions import InvalidTag as _InvalidTag
except ImportError:  # pragma: no cover - the extra is missing; a Keyring says so when used
    _InvalidTag = _NoTag  # type: ignore[assignment,misc]


def key_id_of(data: bytes) -> str | None:
    """The key id a sealed value names, or ``None`` if ``data`` is not sealed."""
    if data[:1] != SEALED_TAG or len(data) < 2:
        return None
    size = data[1]
    return data[2 : 2 + size].decode("ascii", "replace")


def shown(key_id: str) -> str:
    """How a value sealed under ``key_id`` shows to a reader without that key."""
    return f"encrypted (key {key_id})"


def seal_text(keyring: Keyring, text: str) -> str:
    """A text column's value sealed: what ``shown`` says, then the sealed bytes (base64)."""
    sealed = base64.b64encode(keyring._seal(text.encode("utf-8"))).decode("ascii")
    return f"{shown(keyring.current)} {sealed}"


def open_text(opener: Callable[[bytes], bytes] | None, text: str | None) -> str | None:
    """The text ``seal_text`` sealed, or what ``shown`` says where ``opener`` cannot open it;
    a text that was never sealed is returned as it is."""
    if text is None or not text.startswith("encrypted (key "):
        return text
    head, _, body = text.partition(") ")
    if opener is not None and body:
        try:
            return opener(base64.b64decode(body)).decode("utf-8")
        except (StoreError, ValueError):
            pass
    return head + ")"


def new_key_text() -> str:
    """A new random key as base64 text."""
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")


class Keyring:
    """The keys payloads are encrypted with, by key id; ``current`` encrypts, every key
    decrypts. ``digest_key`` keys content addressing (by default derived from the first key
    the store ever used and kept in the store, wrapped under each current key)."""

    def __init__(
        self,
        keys: Mapping[str, bytes | str],
        *,
        current: str | None = None,
        digest_key: bytes | str | None = None,
    ) -> None:
        if not keys:
            raise UsageError("Keyring needs at least one key: Keyring({'k1': key})")
        self.keys: dict[str, bytes] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise UsageError(f"key id {key_id!r}: use 1 to 64 letters, digits, '_', '.' or '-'")
            self.keys[key_id] = _key_bytes(key, f"key {key_id!r}")
        self.current = current if current is not None else next(iter(self.keys))
        if self.current not in self.keys:
            raise UsageError(f"current={self.current!r} is not one of the keys {list(self.keys)}")
        self.digest_key: bytes | None = (
            None if digest_key is None else _key_bytes(digest_key, "digest_key")
        )
        self._ciphers: dict[str, Any] = {}
        self._sealer: Any = None  # the current key's cipher, once made
        self._digests: dict[bytes, bytes] = {}
        self._wrapped: list[str] = []  # the key ids the store's digest key is wrapped under
        self._verified: set[str] = set()  # key ids seen to open the store's digest key
        self._nonces: tuple[bytes, Any] | None = None  # (digest key, its nonce state)
        current_id = self.current.encode("ascii")
        self._head = SEALED_TAG + bytes([len(current_id)]) + current_id

    def __repr__(self) -> str:
        return f"Keyring(keys={list(self.keys)}, current={self.current!r})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring ``STALWART_ENCRYPTION_KEYS="k2:BASE64,k1:BASE64"`` names (the first is
        current; ``STALWART_DIGEST_KEY`` is the digest key), or ``None`` where it is unset."""
        env = os.environ if environ is None else environ
        text = env.get(_ENV_KEYS, "").strip()
        if not text:
            return None
        keys: dict[str, str] = {}
        for part in text.split(","):
            key_id, colon, key = part.strip().partition(":")
            if not colon or not key_id or not key:
                raise UsageError(
                    f"{_ENV_KEYS}: {part.strip()!r} is not KEY_ID:BASE64; write "
                    f'{_ENV_KEYS}="k2:BASE64,k1:BASE64" (the first is current)'
                )
            keys[key_id.strip()] = key.strip()
        digest = env.get(_ENV_DIGEST, "").strip() or None
        return cls(keys, digest_key=digest)

    # -- sealing --------------------------------------------------------------------------

    def _cipher(self, key_id: str) -> Any:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            try:
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            except ImportError:  # pragma: no cover - the extra is missing
                raise UsageError(
                    "encryption needs the cryptography package: pip install 'stalwart[encryption]'"
                ) from None
            cipher = self._ciphers[key_id] = AESGCM(self.keys[key_id])
            if key_id == self.current:
                self._sealer = cipher
        return cipher

    def _digest_key(self) -> bytes:
        if self.digest_key is None:
            wrapped = sorted(self._wrapped)
            if not wrapped:
                raise UsageError("the keyring is not attached to a store yet (no digest key)")
            mine = list(self.keys)
            raise EncryptionKeyMissing(
                wrapped[0],
                detail=f"this keyring's keys {mine} never opened this store, whose digest key "
                f"is wrapped under keys {wrapped} only: without that key nothing can be "
                f"written encrypted (nor read what those keys sealed); add key "
                f"{wrapped[0]!r} to the keyring beside yours (Keyring({{{mine[0]!r}: ..., "
                f"{wrapped[0]!r}: ...}}, current={self.current!r}); it can go once the store "
                "has wrapped its digest key under yours), or pass digest_key=",
            )
        return self.digest_key

    def _digest(self, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` under the digest key (what addresses content). The
        pieces of a conversation are keyed again at each step: the last few thousand are
        remembered."""
        found = self._digests.get(data)
        if found is None:
            found = hmac.digest(self.digest_key or self._digest_key(), data, "sha256")
            if len(self._digests) >= _REMEMBERED:
                self._digests.clear()
            self._digests[data] = found
        return found

    def _nonce_state(self) -> Any:
        """The keyed BLAKE2b of the nonce, fed the current key's tag and an empty ``aad``'s
        length: copied for each value, so no value pays for the keying."""
        key = self.digest_key or self._digest_key()
        if self._nonces is None or self._nonces[0] is not key:
            state = hashlib.blake2b(digest_size=_NONCE, key=key, person=b"stalwart nonce")
            state.update(self._head + b"\x00\x00")
            self._nonces = (key, state)
        return self._nonces[1]

    def _seal(self, data: bytes, aad: bytes = b"") -> bytes:
        """``data`` encrypted under the current key, tagged with its id. The nonce is the
        keyed BLAKE2b of the tag, ``aad``'s length, ``aad`` and ``data``."""
        head = self._head
        if aad:
            key = self.digest_key or self._digest_key()
            framed = head + len(aad).to_bytes(2, "big") + aad + data
            nonce = hashlib.blake2b(
                framed, digest_size=_NONCE, key=key, person=b"stalwart nonce"
            ).digest()
        else:
            state = self._nonce_state().copy()
            state.update(data)
            nonce = state.digest()
        cipher = self._sealer or self._cipher(self.current)
        sealed: bytes = cipher.encrypt(nonce, data, aad or None)
        return head + nonce + sealed

    def _open(self, data: bytes, aad: bytes = b"") -> bytes:
        """The plaintext of sealed ``data``: ``EncryptionKeyMissing`` when its key is not
        here, ``CorruptRecord`` when it was changed."""
        if data[:1] != SEALED_TAG:
            return data
        start = 2 + data[1]
        key_id = data[2:start].decode("ascii", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            if key_id not in self.keys:
                raise EncryptionKeyMissing(key_id)
            cipher = self._cipher(key_id)
        nonce, body = data[start : start + _NONCE], data[start + _NONCE :]
        try:
            return bytes(cipher.decrypt(nonce, body, aad or None))
        except _InvalidTag:
            if key_id in self._verified:
                why = (
                    f"key {key_id} opens the store's digest key, so the value was changed "
                    "after it was written; restore it from a backup"
                )
            else:
                why = (
                    f"the key under id {key_id!r} does not open it, most likely wrong key "
                    f"material under that id (give {key_id!r} the key that wrote the value, in "
                    "STALWART_ENCRYPTION_KEYS or Keyring(...)); else the value was changed "
                    "after it was written"
                )
            raise CorruptRecord(
                f"an encrypted payload (key {key_id}) does not decrypt: {why}"
            ) from None

    # -- the digest key, kept in the store --------------------------------------------------

    def _wrap_digest_key(self) -> dict[str, bytes]:
        """The digest key sealed under each key of the ring (rows for the store)."""
        key = self._digest_key()
        out = {}
        for key_id in self.keys:
            nonce = secrets.token_bytes(_NONCE)
            body = self._cipher(key_id).encrypt(nonce, key, _DIGEST_INFO)
            out[key_id] = nonce + body
        return out

    def _attach(self, wrapped: Mapping[str, bytes]) -> dict[str, bytes]:
        """Take the digest key from the store's ``wrapped`` rows (key id -> sealed digest
        key), or derive it from the current key where the store has none; returns the rows
        the store lacks (the key wrapped under keys it has no row for)."""
        self._wrapped = list(wrapped)
        self._verify(wrapped)
        if self.digest_key is None:
            if not wrapped:
                self.digest_key = hmac.new(
                    self.keys[self.current], _DIGEST_INFO, hashlib.sha256
                ).digest()
            elif not set(wrapped) & set(self.keys):
                return {}  # reads work; a write names the keys it needs
            else:
                self.digest_key = self._unwrap(wrapped)
        added = {k: v for k, v in self._wrap_digest_key().items() if k not in wrapped}
        self._verified.update(added)  # they wrap it now: nothing in the store is under them
        return added

    def _verify(self, wrapped: Mapping[str, bytes]) -> None:
        """Check each key of the ring against the digest key the store wrapped under its id:
        wrong key material under a known id is refused here, by name, before it misleads."""
        for key_id, row in wrapped.items():
            if key_id not in self.keys:
                continue
            try:
                self._cipher(key_id).decrypt(row[:_NONCE], row[_NONCE:], _DIGEST_INFO)
            except _InvalidTag:
                raise CorruptRecord(
                    f"key {key_id!r} of the keyring does not open the store's digest key, which "
                    f"was wrapped under key id {key_id!r}: the key under that id is not the one "
                    "that wrote this store (most likely wrong key material); give id "
                    f"{key_id!r} its original key in STALWART_ENCRYPTION_KEYS or Keyring(...) "
                    "(a new key needs a new id)"
                ) from None
            self._verified.add(key_id)

    def _unwrap(self, wrapped: Mapping[str, bytes]) -> bytes:
        for key_id, row in wrapped.items():
            if key_id in self.keys:
                try:
                    return bytes(
                        self._cipher(key_id).decrypt(row[:_NONCE], row[_NONCE:], _DIGEST_INFO)
                    )
                except _InvalidTag:
                    raise CorruptRecord(
                        f"the store's digest key wrapped under key {key_id} does not decrypt"
                    ) from None
        raise AssertionError("no key of the ring wraps the digest key")  # checked above
