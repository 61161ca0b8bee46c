"""The extension port's tables (docs/extension-port.md) in a store: which namespaces it
holds, at which version, and their tables (``ext_<namespace>_*``)."""

from __future__ import annotations

from .access import Bulk

__all__ = ["extension_tables", "extension_versions"]


def extension_versions(store: Bulk) -> dict[str, int]:
    """Each namespace the store's integrations created, with its version."""
    if not store.columns("stalwart_extensions"):
        return {}
    sql = "SELECT namespace, version FROM stalwart_extensions ORDER BY namespace"
    return {ns: int(v) for ns, v in store.read(lambda c: c.execute(sql).fetchall())}


def extension_tables(store: Bulk) -> list[str]:
    """The tables of the integrations' namespaces (``ext_*``), by name."""
    return [name for name in store.tables() if name.startswith("ext_")]
