"""The ``KeyStore`` verbs over SQL (``_store.keys``)."""

from __future__ import annotations

import functools
from typing import Any

from ..._errors import UsageError
from ..._keyring import shown
from ..payloads import REF_TAG
from ..sealed import reseal_error, reseal_text
from ._base import SQLBase

__all__ = ["KeyVerbs"]

# Every column that holds a payload, and the payloads table, in the order rekey visits them.
_COLUMNS = (
    "payloads_data",
    "journal_input",
    "journal_output",
    "runs_input",
    "runs_output",
    "runs_progress",
    "events_payload",
    "approvals_details",
    "shared_writes_value",
    "schedules_input",
    "snapshot_chunks_data",
    "stream_chunks_data",
    "journal_error",
    "runs_error",
    "approvals_reason",
)
# Text columns: an error record's message (JSON) and an approval's reason.
_TEXT = {"journal_error": reseal_error, "runs_error": reseal_error, "approvals_reason": reseal_text}
# Rows sealed bound to their digest (the last of their keys).
_BOUND = frozenset({"payloads_data", "snapshot_chunks_data"})


class KeyVerbs(SQLBase):
    """The wrapped digest key and rekey."""

    def digest_keys(self) -> dict[str, bytes]:
        """The digest key as wrapped under each key id."""
        return {str(k): bytes(v) for k, v in self._rows("digest_keys", {})}

    def add_digest_keys(self, wrapped: dict[str, bytes]) -> None:
        """Keep the digest key wrapped under more key ids."""

        def work(conn: Any) -> None:
            for key_id, data in wrapped.items():
                conn.execute(self._q["add_digest_key"], {"key_id": key_id, "wrapped": data})

        if wrapped:
            self._write(work)

    def rekey(self, batch: int) -> int:
        """Re-encrypt at most ``batch`` values not sealed under the current key."""
        if self.keyring is None:
            raise UsageError(
                "rekey needs a keyring: set STALWART_ENCRYPTION_KEYS (`stalwart keygen` "
                "prints a key) or open the app with encryption=Keyring(...)"
            )
        done = 0
        for column in _COLUMNS:
            if done >= batch:
                break
            done += self._write(functools.partial(self._rekey_column, column, batch - done))
        return done

    def _rekey_column(self, column: str, limit: int, conn: Any) -> int:
        keyring = self.keyring
        assert keyring is not None
        key_id = keyring.current.encode("ascii")
        prefix = b"E" + bytes([len(key_id)]) + key_id
        shown_now = shown(keyring.current)
        params: dict[str, Any] = {"limit": limit}
        if column in _TEXT:
            params |= {"sealed_now": f'%"message": "{shown_now}"%', "text_now": f"{shown_now} %"}
        else:
            params |= {"size": len(prefix), "prefix": prefix, "ref": REF_TAG}
        rows = conn.execute(self._q[f"rekey_page_{column}"], params).fetchall()
        done = 0
        for row in rows:
            keys, old = row[:-1], row[-1]
            if column in _TEXT:
                new: Any = _TEXT[column](keyring, old)
            else:
                old = bytes(old)
                aad = bytes(keys[-1]) if column in _BOUND else b""
                new = keyring._seal(keyring._open(old, aad), aad)
            update = {f"k{i}": key for i, key in enumerate(keys)} | {"new": new, "old": old}
            done += conn.execute(self._q[f"rekey_{column}"], update).rowcount
        return done
