"""Named SQL queries, loaded from ``sql/<backend>/queries.sql`` (``-- name: x`` blocks)."""

from __future__ import annotations

import re
from importlib import resources

__all__ = ["load_migrations", "load_queries"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(backend: str) -> dict[str, str]:
    """Map of query name to SQL text for ``backend``."""
    text = resources.files(__package__).joinpath("sql", backend, "queries.sql").read_text("utf-8")
    parts = _NAME.split(text)
    return {name: sql.strip() for name, sql in zip(parts[1::2], parts[2::2], strict=True)}


def load_migrations(backend: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every migration file of ``backend``, in version order."""
    folder = resources.files(__package__).joinpath("sql", backend, "migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text("utf-8")))
    return sorted(found)
