"""``app.rekey``: encryption at rest's online re-encryption (docs/encryption.md)."""

from __future__ import annotations

from ._errors import UsageError
from ._runtime import Runtime
from ._store.portable.extension_keys import rekey_extensions

__all__ = ["Rekeying"]


class Rekeying:
    """``app.rekey``: the app's mixin."""

    _runtime: Runtime

    def rekey(self, batch: int = 500) -> int:
        """Re-encrypt at most ``batch`` stored payloads held under older keys, or in
        plaintext, with the keyring's current key, then what the integrations sealed in their
        tables under older keys; how many it did (0: none is left)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UsageError(f"batch={batch!r}: pass a positive int")
        store = self._runtime.store
        done = store.rekey(batch)
        keyring = store.keyring
        if done < batch and keyring is not None:
            done += rekey_extensions(store, keyring, batch - done)
        return done
