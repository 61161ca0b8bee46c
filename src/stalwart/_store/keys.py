"""The store's part in encryption at rest: the wrapped digest key, and rekeying."""

from __future__ import annotations

from typing import Protocol

from .._keyring import Keyring
from .versions import SchemaVersion

__all__ = ["ENCRYPTED_SCHEMA", "KeyStore", "attach_keyring"]

# The schema version of the first code that reads encrypted rows: the first encrypted write
# raises the store's oldest compatible version to it.
ENCRYPTED_SCHEMA = 23


class KeyStore(Protocol):
    """The digest key kept wrapped in the store, and re-encrypting what it holds."""

    keyring: Keyring | None

    def schema_version(self) -> SchemaVersion:
        """See ``VersionStore``."""

    def require_oldest_compatible(self, version: int) -> None:
        """See ``VersionStore``."""

    def digest_keys(self) -> dict[str, bytes]:
        """The digest key as wrapped under each key id (empty before the first keyring)."""

    def add_digest_keys(self, wrapped: dict[str, bytes]) -> None:
        """Keep the digest key wrapped under more key ids (an id already kept is left)."""

    def rekey(self, batch: int) -> int:
        """Re-encrypt at most ``batch`` stored values held under a key other than the
        keyring's current one, or in plaintext; how many it did (0: none is left). Each
        page is one transaction whose ``UPDATE`` requires the value it read."""


def attach_keyring(store: KeyStore, keyring: Keyring) -> None:
    """Give ``store`` the keyring: the digest key taken from the store (or derived and kept
    there, wrapped under each key), and code that cannot read encrypted rows refused."""
    store.add_digest_keys(keyring._attach(store.digest_keys()))
    # a read, not a write transaction, on every open after the first encrypted one
    if store.schema_version().oldest_compatible < ENCRYPTED_SCHEMA:
        store.require_oldest_compatible(ENCRYPTED_SCHEMA)
    store.keyring = keyring
