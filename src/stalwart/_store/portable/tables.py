"""THE list of the store's tables that move with its data (``stalwart migrate``, ``export`` and
``import``), and of those that stay, each with why.

A table a migration adds goes in one of the two lists, or a test fails
(tests/contract/test_portable_tables.py compares both with the tables of a fresh store): a new
table is one line here. Columns are not listed: a copy reads them from the source's schema and
copies those the target has too, so a column a migration adds moves with no change here.

- ``key``: the columns a row is found and paged by (its primary key), in order; ``()`` for a
  small table without one, read whole.
- ``run``: how a row belongs to a run, for ``export``: the run's id column, or a
  ``(column, parent table, parent column)`` link through a row that does (a snapshot's files);
  ``None`` for a table of the whole store, which only ``migrate`` copies.
- ``payloads``: the columns holding a payload as the store keeps it (inline, or a reference to
  rows of ``payloads``), whose referenced rows an export carries along.
- ``merge``: rows an app writes when it opens a store (its queue declarations): a target may
  hold some already; the target's row is kept.
- ``replace``: rows an app writes when it opens an empty store with a keyring (a digest key of
  its own): the source's replace them.
- ``identity``: a column the database numbers (PostgreSQL's identity), set past the highest
  copied value after a copy; a row imported into a store that has rows is numbered anew.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COPIED", "NOT_COPIED", "RUN_TABLES", "Table", "table"]


@dataclass(frozen=True, slots=True)
class Table:
    """How one table is copied (see the module docstring)."""

    name: str
    key: tuple[str, ...]
    run: str | tuple[str, str, str] | None = None
    payloads: tuple[str, ...] = ()
    merge: bool = False
    identity: str | None = None
    snapshot: bool = False  # exported only with --with-snapshots
    replace: bool = False  # what the target's app wrote on opening it, replaced by the source's


# In dependency order: a run before what belongs to it, a snapshot before its files.
COPIED: tuple[Table, ...] = (
    Table("runs", ("workflow_id",), run="workflow_id", payloads=("input", "output", "progress")),
    Table("journal", ("id",), run="workflow_id", payloads=("input", "output"), identity="id"),
    Table("events", ("id",), run="workflow_id", payloads=("payload",), identity="id"),
    Table("approvals", ("workflow_id", "approval_id"), run="workflow_id", payloads=("details",)),
    Table("run_spend", ("workflow_id",), run="workflow_id"),
    Table(
        "run_calls",
        ("workflow_id", "name", "input", "position"),
        run="workflow_id",
        payloads=("input",),
    ),
    Table("run_spend_steps", ("workflow_id", "name"), run="workflow_id"),
    Table("stream_chunks", ("workflow_id", "stream", "offset"), run="workflow_id"),
    Table("snapshots", ("id",), run="workflow_id", snapshot=True),
    Table(
        "snapshot_files",
        ("snapshot_id", "path"),
        run=("snapshot_id", "snapshots", "id"),
        snapshot=True,
    ),
    Table(
        "snapshot_uses",
        ("snapshot_id", "digest"),
        run=("snapshot_id", "snapshots", "id"),
        snapshot=True,
    ),
    Table("snapshot_chunks", ("digest",), identity="id"),
    Table("payloads", ("digest",)),
    Table("shared_writes", ("key", "version"), payloads=("value",)),
    Table("schedules", ("name",), payloads=("input",)),
    Table("ingress_sources", ("name",)),
    Table("queues", ("name",), merge=True),
    Table("queue_starts", ()),
    Table("breakers", ("name",)),
    Table("breaker_failures", ()),
    # the digest key of an encrypted store, wrapped under each key: one the target's app
    # derived when it opened the (empty) target gives way to the source's
    Table("digest_keys", ("key_id",), replace=True),
)

NOT_COPIED: dict[str, str] = {
    "stalwart_schema": "the target records its own schema (its oldest compatible version is "
    "raised to the source's)",
    "stalwart_extensions": "an integration's version is recorded when its tables are created "
    "in the target",
    "workers": "the processes serving the source, not data: the target's workers appear as "
    "they start",
}

# What an export carries per run (the rest belongs to the whole store).
RUN_TABLES: tuple[Table, ...] = tuple(t for t in COPIED if t.run is not None)


def table(name: str) -> Table:
    """The entry of ``name``; an extension's table (``ext_*``) is copied whole, by all its
    columns."""
    for entry in COPIED:
        if entry.name == name:
            return entry
    return Table(name, ())
