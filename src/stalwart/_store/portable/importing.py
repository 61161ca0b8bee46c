"""``stalwart import``: the runs of an export recreated in a store, one transaction per run.

A run whose id the store holds is skipped whole, never overwritten. Rows the database
numbers (journal entries, events) are numbered anew in the target, in their exported order,
and the one column that refers to such a number (``run_spend.budget_entry``) follows. The
journal's triggers compute the run's spend as it is imported; the exported totals then
replace them, so they are what the source held. Payload rows and snapshot chunks are
content-addressed: one the store holds already is kept. A run that was running keeps no lease
(the source's worker held it): a worker of the target recovers it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..._errors import StoreError
from ..._keyring import SEALED_TAG
from ..base import Store
from ..keys import ENCRYPTED_SCHEMA
from .access import Bulk
from .exporting import FORMAT, decoded
from .tables import RUN_TABLES, Table

__all__ = ["Outcome", "UnreadableLine", "import_lines"]

_SPEND = ("run_spend", "run_calls", "run_spend_steps")


class UnreadableLine(ValueError):
    """A line that is not a run of a stalwart export."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one line: ``imported``, ``skipped`` (the id exists), ``unreadable`` or
    ``failed`` (the store refused it; ``why`` says how)."""

    line: int
    workflow_id: str | None
    outcome: str
    why: str = ""


def _parsed(text: str) -> dict[str, Any]:
    try:
        line = json.loads(text)
    except ValueError as exc:
        raise UnreadableLine(f"not JSON ({exc})") from None
    if not isinstance(line, dict) or line.get("stalwart_export") != FORMAT:
        raise UnreadableLine(f"not a run of a stalwart export (format {FORMAT})")
    rows = line.get("rows")
    if not isinstance(rows, dict) or not isinstance(rows.get("runs"), list) or not rows["runs"]:
        raise UnreadableLine("it has no run row")
    try:
        for name, found in rows.items():
            rows[name] = [{c: decoded(v) for c, v in row.items()} for row in found]
        for name in ("payloads", "snapshot_chunks"):
            line[name] = [{c: decoded(v) for c, v in r.items()} for r in line.get(name, [])]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise UnreadableLine(f"a row does not decode ({type(exc).__name__}: {exc})") from None
    return line


def _sealed(line: dict[str, Any]) -> bool:
    """Whether a parsed line carries an encrypted value (which release 0.2 cannot read)."""
    tables = [*line["rows"].values(), line.get("payloads", []), line.get("snapshot_chunks", [])]
    return any(
        isinstance(value, bytes) and value[:1] == SEALED_TAG
        for rows in tables
        for row in rows
        for value in row.values()
    )


class _Importer:
    def __init__(self, store: Store) -> None:
        self.bulk = Bulk(store)

    def _insert(self, conn: Any, entry: Table, rows: list[dict[str, Any]]) -> None:
        mine = set(self.bulk.columns(entry.name))
        for row in rows:
            columns = [c for c in row if c in mine and c != entry.identity]
            values = [row[c] for c in columns]
            self.bulk.insert_new(conn, entry.name, columns, [values], entry.key)

    def _numbered(self, conn: Any, entry: Table, rows: list[dict[str, Any]]) -> dict[int, int]:
        assert entry.identity is not None
        mine = set(self.bulk.columns(entry.name))
        renumbered: dict[int, int] = {}
        for row in rows:
            columns = [c for c in row if c in mine and c != entry.identity]
            new = self.bulk.insert_numbered(
                conn, entry.name, columns, [row[c] for c in columns], entry.identity
            )
            renumbered[int(row[entry.identity])] = new
        return renumbered

    def run(self, line: dict[str, Any]) -> bool:
        """Import one parsed line in one transaction; ``False`` when its run exists."""
        workflow_id = line["workflow_id"]
        rows: dict[str, list[dict[str, Any]]] = line["rows"]
        bulk = self.bulk

        def work(conn: Any) -> bool:
            exists = f"SELECT 1 FROM runs WHERE workflow_id = {bulk.param('id')}"
            if conn.execute(exists, {"id": workflow_id}).fetchone() is not None:
                return False
            chunks = Table("snapshot_chunks", ("digest",), identity="id")
            self._insert(conn, Table("payloads", ("digest",)), line["payloads"])
            self._insert(conn, chunks, line.get("snapshot_chunks", []))
            journal_ids: dict[int, int] = {}
            for entry in RUN_TABLES:
                found = [dict(r) for r in rows.get(entry.name, [])]
                if entry.name == "runs":
                    for run in found:
                        if run.get("status") == "running":
                            run["lease_owner"] = run["lease_expires_at"] = None
                if entry.name in _SPEND:
                    conn.execute(
                        f"DELETE FROM {entry.name} WHERE workflow_id = {bulk.param('id')}",
                        {"id": workflow_id},
                    )
                if entry.name == "run_spend":
                    for spend in found:
                        if spend.get("budget_entry") is not None:
                            spend["budget_entry"] = journal_ids.get(int(spend["budget_entry"]))
                if entry.identity is not None:
                    numbered = self._numbered(conn, entry, found)
                    if entry.name == "journal":
                        journal_ids = numbered
                else:
                    self._insert(conn, entry, found)
            return True

        return bool(bulk.write(work))


def import_lines(store: Store, lines: Iterable[str]) -> Iterator[Outcome]:
    """Import each line of an export (see the module docstring); what became of each."""
    importer = _Importer(store)
    raised = False
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            line = _parsed(text)
        except UnreadableLine as exc:
            yield Outcome(number, None, "unreadable", str(exc))
            continue
        workflow_id = str(line.get("workflow_id"))
        try:
            if not raised and _sealed(line):
                # as the first encrypted write does: older code now refuses the store
                store.require_oldest_compatible(ENCRYPTED_SCHEMA)
                raised = True
            done = importer.run(line)
        except StoreError as exc:  # rolled back: the run is not in the store
            yield Outcome(number, workflow_id, "failed", str(exc))
            continue
        yield Outcome(number, workflow_id, "imported" if done else "skipped")
