"""The store's versions: which schema it holds, and the oldest code that may still use it.

Every migration records a row in ``stalwart_schema``: the schema version it brought, and the
oldest code schema version that can still read and write the store. A migration that only adds
(expand) keeps the previous release's number, so during a rolling deploy the previous release
goes on serving a store the new one upgraded; one that drops or changes what older code reads
raises it (``-- oldest-compatible: N``). A store whose oldest number is above this code's
``SCHEMA_VERSION`` is refused when it is opened, never misread.

Data can raise it too, without a migration: the first row written in a form an older release
cannot read (an encrypted payload: release 0.2 would take its ciphertext for a value) must
first call :meth:`VersionStore.require_oldest_compatible`, so that from then on the older
release refuses the store instead of misreading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["SchemaVersion", "VersionStore"]


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """What a store records of its schema: its version, and the oldest code schema version
    that can use it."""

    version: int
    oldest_compatible: int


class VersionStore(Protocol):
    """The store's schema version, and raising the oldest code that may use it."""

    def schema_version(self) -> SchemaVersion:
        """The store's schema version and the oldest code schema version it serves."""

    def require_oldest_compatible(self, version: int) -> None:
        """From now on, refuse the store to code whose schema version is below ``version``.

        Call it, before the first write that code older than ``version`` could not read, in
        its own transaction (one transaction: it raises the store's oldest compatible
        version to ``version`` where it is lower, and leaves it where it is as high or
        higher, so calling it again, or from many processes at once, changes nothing more).
        Processes of an older release that opened the store before it are not stopped: they
        must be gone first (finish the deploy). ``version`` must be at least 1 and at most
        this code's own schema version (a higher one would refuse this code too):
        ``UsageError`` otherwise."""
