"""``app.rekey``: encryption at rest's online re-encryption (docs/encryption.md)."""

from __future__ import annotations

from ._errors import UsageError
from ._runtime import Runtime

__all__ = ["Rekeying"]


class Rekeying:
    """``app.rekey``: the app's mixin."""

    _runtime: Runtime

    def rekey(self, batch: int = 500) -> int:
        """Re-encrypt at most ``batch`` stored payloads held under older keys, or in
        plaintext, with the keyring's current key; how many it did (0: none is left)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UsageError(f"batch={batch!r}: pass a positive int")
        return self._runtime.store.rekey(batch)
