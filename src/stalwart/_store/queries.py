"""Named SQL queries, loaded from ``sql/<backend>/queries.sql`` (``-- name: x`` blocks), and
versioned migrations from ``sql/<backend>/migrations/NNNN_name.sql``.

A ``-- fragment: x`` block is a condition several queries share: each ``{{x}}`` in a query is
replaced by it (its comment lines dropped), so the condition is written once per dialect and
a query naming an unknown fragment fails to load.

An optional condition, ``(:x IS NULL OR cond)``, is resolved per call by :func:`specialize`:
a planner that cannot see bound values (SQLite's) would otherwise use no index for ``cond``."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import NamedTuple

__all__ = ["Migration", "has_optional", "load_migrations", "load_queries", "specialize"]

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_USE = re.compile(r"\{\{(\w+)\}\}")
_OLDEST = re.compile(r"^-- oldest-compatible: (\d+)\s*$", re.MULTILINE)
# "(:x IS NULL OR " in either placeholder style (SQLite's :x, psycopg's %(x)s)
_OPTIONAL = re.compile(r"\((?::(\w+)|%\((\w+)\)s) IS NULL OR ")


class Migration(NamedTuple):
    """One schema version: its SQL and the oldest code schema version that can use it."""

    version: int
    name: str
    sql: str
    oldest_compatible: int


def load_queries(backend: str) -> dict[str, str]:
    """Map of query name to SQL text for ``backend``."""
    text = resources.files(__package__).joinpath("sql", backend, "queries.sql").read_text("utf-8")
    parts = _BLOCK.split(text)
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for kind, name, sql in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if kind == "fragment":
            lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
            fragments[name] = "\n".join(lines).strip()
        else:
            queries[name] = sql.strip()

    def fragment(use: re.Match[str]) -> str:
        if use[1] not in fragments:
            raise KeyError(f"{backend} queries use the unknown fragment {use[1]!r}")
        return fragments[use[1]]

    return {name: _USE.sub(fragment, sql) for name, sql in queries.items()}


def load_migrations(backend: str) -> list[Migration]:
    """Every migration of ``backend``, in version order.

    A migration that only adds (an expand step) serves the code that served the store before
    it; one that contracts (drops or changes what older code reads) says so in a
    ``-- oldest-compatible: N`` line.
    """
    folder = resources.files(__package__).joinpath("sql", backend, "migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            sql = entry.read_text("utf-8")
            oldest = _OLDEST.search(sql)
            found.append(Migration(int(match[1]), match[2], sql, int(oldest[1]) if oldest else 1))
    return sorted(found)


def _closing(sql: str, start: int) -> int:
    """Where the parenthesis opened at ``start`` closes."""
    depth = 0
    for pos in range(start, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[pos], 0)
        if depth == 0:
            return pos
    raise ValueError(f"an optional condition is not closed in {sql!r}")


@functools.lru_cache(maxsize=1024)
def has_optional(sql: str) -> bool:
    """Whether ``sql`` has an optional condition for :func:`specialize` to resolve (most
    statements, the claim and the journal appends among them, have none)."""
    return _OPTIONAL.search(sql) is not None


@functools.lru_cache(maxsize=1024)
def specialize(sql: str, absent: frozenset[str]) -> str:
    """``sql`` with each optional condition ``(:x IS NULL OR cond)`` resolved: ``TRUE`` when
    ``x`` is in ``absent`` (bound to ``NULL``), else ``(cond)``, so that the condition of a
    filter given can use an index and one not given costs nothing. Same rows, same order."""
    out, pos = [], 0
    while (found := _OPTIONAL.search(sql, pos)) is not None:
        end = _closing(sql, found.start())
        name = found[1] or found[2]
        kept = "TRUE" if name in absent else f"({specialize(sql[found.end() : end], absent)})"
        out += [sql[pos : found.start()], kept]
        pos = end + 1
    return "".join(out) + sql[pos:]
