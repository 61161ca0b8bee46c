"""Named SQL queries, loaded from ``sql/queries.sql`` (every dialect's) merged with
``sql/<backend>/queries.sql`` (the dialect's own text), and versioned migrations from
``sql/<backend>/migrations/NNNN_name.sql``.

The shared file holds ``-- name: x`` blocks (a query, the same on every dialect), ``-- fragment:
x`` blocks and ``-- dialect: x`` declarations (a query each dialect writes itself, with a
comment saying why it differs). A dialect's file holds a ``-- name: x`` block for each declared
one and ``-- own: x`` blocks for the queries only its store code runs. A dialect that lacks a
declared query, writes one not declared, or owns a name the shared file has fails to load.

A ``-- fragment: x`` block is a condition several queries share: each ``{{x}}`` in a query is
replaced by it (its comment lines dropped), so the condition is written once and a query naming
an unknown fragment fails to load.

An optional condition, ``(:x IS NULL OR cond)``, is resolved per call by :func:`specialize`:
a planner that cannot see bound values (SQLite's) would otherwise use no index for ``cond``."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import NamedTuple

__all__ = [
    "Migration",
    "has_optional",
    "load_migrations",
    "load_queries",
    "merge_queries",
    "specialize",
]

_BLOCK = re.compile(r"^-- (name|fragment|dialect|own): (\w+)\s*$", re.MULTILINE)
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
    sql = resources.files(__package__).joinpath("sql")
    shared = sql.joinpath("queries.sql").read_text("utf-8")
    return merge_queries(shared, sql.joinpath(backend, "queries.sql").read_text("utf-8"), backend)


def _blocks(text: str, kinds: tuple[str, ...], where: str) -> dict[tuple[str, str], str]:
    """The ``-- kind: name`` blocks of ``text``, by (kind, name), each name once per kind."""
    parts = _BLOCK.split(text)
    if _uncommented(parts[0]).strip():
        raise ValueError(f"{where} has SQL before its first block; put it in a named block")
    found: dict[tuple[str, str], str] = {}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if kind not in kinds:
            raise ValueError(f"{where} has a '-- {kind}:' block ({name}); it takes {kinds}")
        if (kind, name) in found:
            raise ValueError(f"{where} has two '-- {kind}: {name}' blocks; keep one")
        found[kind, name] = body
    return found


def _uncommented(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def merge_queries(shared_text: str, dialect_text: str, backend: str) -> dict[str, str]:
    """The queries of ``backend``: the shared file's, its declared ones in the dialect's text,
    and the dialect's own, each fragment written in."""
    shared = _blocks(shared_text, ("name", "fragment", "dialect"), "sql/queries.sql")
    dialect = _blocks(dialect_text, ("name", "own"), f"sql/{backend}/queries.sql")
    declared = {name for kind, name in shared if kind == "dialect"}
    for (kind, name), body in shared.items():
        if kind == "dialect" and _uncommented(body).strip():
            raise ValueError(f"sql/queries.sql declares {name!r} per dialect but gives it SQL")
    if both := sorted(declared & {name for kind, name in shared if kind == "name"}):
        raise ValueError(f"sql/queries.sql both writes and declares per dialect {both}; keep one")
    written = {name for kind, name in dialect if kind == "name"}
    if missing := sorted(declared - written):
        raise ValueError(f"sql/{backend}/queries.sql lacks the declared queries {missing}")
    if undeclared := sorted(written - declared):
        raise ValueError(
            f"sql/{backend}/queries.sql writes {undeclared}, which sql/queries.sql does not "
            "declare with '-- dialect:' (declare it there, or make it '-- own:')"
        )
    shared_names = {name for kind, name in shared if kind == "name"} | declared
    if clashes := sorted(shared_names & {name for kind, name in dialect if kind == "own"}):
        raise ValueError(f"sql/{backend}/queries.sql owns {clashes}, which sql/queries.sql has")
    fragments = {
        name: _uncommented(body).strip()
        for (kind, name), body in shared.items()
        if kind == "fragment"
    }
    queries = {name: body.strip() for (kind, name), body in shared.items() if kind == "name"}
    queries.update((name, body.strip()) for (_, name), body in dialect.items())

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
