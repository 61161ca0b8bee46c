"""Stores: ``open_store(url)`` picks the backend and is the only code that imports one."""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._errors import NotDurableWarning, StoreError, UsageError, mask_url
from .base import Entry, IndexRow, JournalRow, RunRow, Store

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DEFAULT_URL",
    "Entry",
    "IndexRow",
    "JournalRow",
    "RunRow",
    "Store",
    "open_store",
    "stamp_with",
    "store_name",
]

DEFAULT_URL = "sqlite:///.stalwart/stalwart.db"


def resolve_url(url: str | None) -> str:
    """``url``, else ``$STALWART_URL``, else the embedded default."""
    return url or os.environ.get("STALWART_URL") or DEFAULT_URL


def store_name(url: str) -> str:
    """``url`` as messages name the store: its password masked, and a relative SQLite path
    made absolute against the working directory (call it where the store is opened, so that
    the name still holds from another folder)."""
    prefix = "sqlite:///"
    if url.startswith(prefix + ":memory:"):
        return mask_url(url)
    if url.startswith(prefix) and len(url) > len(prefix):  # absolute, '..' resolved
        url = prefix + os.path.abspath(url[len(prefix) :])
    return mask_url(url)


def open_store(url: str, *, durability: str = "process") -> Store:
    """Open (and migrate) the store named by ``url``."""
    if durability not in ("process", "power"):
        raise UsageError(f"durability={durability!r}: use 'process' (default) or 'power'")
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from .sqlite import SQLiteStore

        warnings.warn(
            "memory:// keeps nothing after this process ends; use it for tests only",
            NotDurableWarning,
            stacklevel=3,
        )
        return SQLiteStore(url, None, durability=durability)
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise StoreError(
                f"bad SQLite URL {mask_url(url)!r}: write sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db"
            )
        return SQLiteStore(url, url[len("sqlite:///") :], durability=durability)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        return PostgresStore(url, durability=durability)
    raise StoreError(
        f"unknown store URL {mask_url(url)!r}: use sqlite:///path.db (embedded), "
        "postgresql://user@host/db, or memory:// (tests only)"
    )


def stamp_with(store: Store, clock: Callable[[], float]) -> None:
    """Stamp the payload rows ``store`` writes by ``clock``, the app's: the clock the collector
    compares their age against (the server's, over PostgreSQL), so that a machine whose own
    clock is off, by any amount, never makes a row it just stored look old enough to collect."""
    from .sql._base import SQLBase

    if isinstance(store, SQLBase):
        store.stamp_clock = clock
