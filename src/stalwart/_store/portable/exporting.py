"""``stalwart export``: runs as JSON Lines, one object per run, with every row kept for it.

A line is ``{"stalwart_export": 1, "workflow_id": ..., "status": ..., "rows": {TABLE: [ROW,
...]}, "payloads": [ROW, ...], "snapshot_chunks": [ROW, ...]}``: each table of
``tables.RUN_TABLES`` with the run's rows (snapshots and their chunks only when asked), a row
an object of its columns, bytes as ``{"b64": ...}``; ``payloads`` are the rows of the
content-addressed payload table the run's columns reference (pieces, tree nodes and the
dictionaries pieces were compressed against), as the codec and the store wrote them. Runs are
read a page at a time and written one by one: only one run is ever held in memory.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..._keyring import SEALED_TAG
from ..base import Store
from ..garbage import children_of, listed, referenced_by
from .access import Bulk
from .tables import RUN_TABLES, Table

__all__ = ["FORMAT", "Selection", "decoded", "encoded", "export_runs"]

FORMAT = 1


def encoded(value: Any) -> Any:
    """A column value as JSON takes it (bytes as ``{"b64": ...}``)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def decoded(value: Any) -> Any:
    """``encoded``'s inverse."""
    if isinstance(value, dict):
        return base64.b64decode(value["b64"], validate=True)
    return value


@dataclass(frozen=True, slots=True)
class Selection:
    """Which runs to export: ``ids``, else those matching every filter given."""

    ids: tuple[str, ...] = ()
    status: str | None = None
    name: str | None = None
    since: float | None = None
    with_snapshots: bool = False


def _run_ids(bulk: Bulk, selection: Selection) -> Iterator[str]:
    if selection.ids:
        yield from dict.fromkeys(selection.ids)
        return
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for column, value in (("status", selection.status), ("name", selection.name)):
        if value is not None:
            clauses.append(f"{column} = {bulk.param(column)}")
            params[column] = value
    if selection.since is not None:
        clauses.append(f"created_at >= {bulk.param('since')}")
        params["since"] = selection.since
    where = " AND ".join(clauses)
    for page in bulk.pages("runs", ("workflow_id",), ("workflow_id",), where, params):
        yield from (row[0] for row in page)


def _rows(bulk: Bulk, entry: Table, workflow_id: str) -> list[dict[str, Any]]:
    columns = bulk.columns(entry.name)
    if not columns:
        return []
    if isinstance(entry.run, tuple):
        column, parent, parent_key = entry.run
        where = (
            f"{column} IN (SELECT {parent_key} FROM {parent} "
            f"WHERE workflow_id = {bulk.param('run')})"
        )
    else:
        where = f"{entry.run} = {bulk.param('run')}"
    key = entry.key
    ordered = tuple(key) + tuple(c for c in columns if c not in key)
    found = [
        dict(zip(ordered, row, strict=True))
        for page in bulk.pages(entry.name, ordered, key, where, {"run": workflow_id})
        for row in page
    ]
    return [{c: encoded(row[c]) for c in columns} for row in found]


def _referenced(bulk: Bulk, values: Sequence[bytes]) -> list[dict[str, Any]]:
    """Every payloads row ``values`` reach, by what each row says it refers to (a sealed row:
    its ``refs``), so an encrypted store's trees go along without a key."""
    columns = [c for c in ("digest", "data", "refs") if c in bulk.columns("payloads")]
    found: dict[bytes, dict[str, Any]] = {}
    todo = [key for value in values for key in referenced_by(value)]
    while todo:
        digest = todo.pop()
        if digest in found:
            continue
        where = f"digest = {bulk.param('d')}"
        for page in bulk.pages("payloads", columns, (), where, {"d": digest}):
            for row in page:
                stored = dict(zip(columns, row, strict=True))
                found[digest] = stored
                data, refs = bytes(stored["data"]), stored.get("refs")
                if data[:1] == SEALED_TAG and refs is not None:
                    todo.extend(listed(bytes(refs)))
                else:
                    todo.extend(children_of(data))
    return [{c: encoded(v) for c, v in found[d].items()} for d in sorted(found)]


def _export_one(bulk: Bulk, workflow_id: str, with_snapshots: bool) -> dict[str, Any] | None:
    rows: dict[str, list[dict[str, Any]]] = {}
    payload_values: list[bytes] = []
    for entry in RUN_TABLES:
        if entry.snapshot and not with_snapshots:
            continue
        found = _rows(bulk, entry, workflow_id)
        rows[entry.name] = found
        for row in found:
            payload_values.extend(
                decoded(row[c]) for c in entry.payloads if isinstance(row.get(c), dict)
            )
    if not rows["runs"]:
        return None
    line: dict[str, Any] = {
        "stalwart_export": FORMAT,
        "workflow_id": workflow_id,
        "status": rows["runs"][0]["status"],
        "rows": rows,
        "payloads": _referenced(bulk, payload_values),
    }
    if with_snapshots:
        digests = [decoded(u["digest"]) for u in rows.get("snapshot_uses", [])]
        line["snapshot_chunks"] = _chunks(bulk, digests)
    return line


def _chunks(bulk: Bulk, digests: list[bytes]) -> list[dict[str, Any]]:
    columns = [c for c in bulk.columns("snapshot_chunks") if c != "id"]
    out: list[dict[str, Any]] = []
    for digest in dict.fromkeys(digests):
        where = f"digest = {bulk.param('d')}"
        for page in bulk.pages("snapshot_chunks", columns, (), where, {"d": digest}):
            out.extend({c: encoded(v) for c, v in zip(columns, row, strict=True)} for row in page)
    return out


def export_runs(store: Store, selection: Selection) -> Iterator[tuple[str, str | None, str]]:
    """For each selected run: its id, its line (JSON, no newline; ``None`` for an id the
    store does not hold) and its status."""
    bulk = Bulk(store)
    for workflow_id in _run_ids(bulk, selection):
        line = _export_one(bulk, workflow_id, selection.with_snapshots)
        if line is None:
            yield workflow_id, None, ""
            continue
        yield workflow_id, json.dumps(line, separators=(",", ":")), str(line["status"])
