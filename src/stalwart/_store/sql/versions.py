"""The store's versions over SQL (``_store.versions``): reading them, and raising the oldest
code schema version the store serves."""

from __future__ import annotations

import logging
from typing import Any

from ..._errors import UsageError, mask_url
from ..base import SCHEMA_VERSION
from ..versions import SchemaVersion
from ._base import SQLBase

__all__ = ["VersionVerbs"]

log = logging.getLogger("stalwart")


class VersionVerbs(SQLBase):
    """The ``VersionStore`` verbs over SQL."""

    def schema_version(self) -> SchemaVersion:
        """The store's schema version and the oldest code schema version it serves."""
        return self._run(self._schema_in)

    def require_oldest_compatible(self, version: int) -> None:
        """Raise the oldest code schema version the store serves to ``version`` where it is
        lower (see ``VersionStore``): one transaction, one fenced ``UPDATE`` of the latest
        ``stalwart_schema`` row, under the lock migrations take so that a migration
        committing at the same time cannot record the number from before."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise UsageError(f"version={version!r}: pass a schema version (an int)")
        if not 1 <= version <= SCHEMA_VERSION:
            raise UsageError(
                f"version={version}: pass a schema version from 1 to this code's "
                f"{SCHEMA_VERSION} (a higher one would refuse this code too)"
            )

        def work(conn: Any) -> bool:
            self._lock_schema(conn)
            params = {"oldest_compatible": version}
            return bool(conn.execute(self._q["raise_oldest_compatible"], params).rowcount == 1)

        if self._write(work):
            log.info(
                "store %s: code older than schema version %d now refuses it (its oldest "
                "compatible version was raised)",
                mask_url(self.url),
                version,
            )
