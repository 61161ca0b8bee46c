"""The saver's tables (namespace ``langgraph``) and its statements, the same on both dialects
unless a name says otherwise.

- ``ext_langgraph_checkpoints``: one row per checkpoint, without its channel values.
- ``ext_langgraph_blobs``: one row per (thread, namespace, channel, version): a value stored
  whole (``type`` is the serializer's), or a link of a list chain (``type`` is
  ``stalwart:list``; see ``_values``), ``depth`` links above its root.
- ``ext_langgraph_writes``: the pending writes of a checkpoint, per task and index.

``search`` builds ``list()``'s query from the conditions it is asked for. Metadata filters
match as LangGraph's own savers match them on each dialect: SQLite compares each key's value
(``json_extract``), PostgreSQL tests containment (``@>``).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import get_checkpoint_id

from stalwart._extension import Migration

__all__ = ["MIGRATIONS", "NAMESPACE", "search"]

NAMESPACE = "langgraph"

_TABLES = """
CREATE TABLE ext_langgraph_checkpoints (
    thread_id            TEXT NOT NULL,
    checkpoint_ns        TEXT NOT NULL DEFAULT '',
    checkpoint_id        TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    run_id               TEXT,
    type                 TEXT NOT NULL,
    checkpoint           {blob} NOT NULL,
    metadata             {json} NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX ext_langgraph_checkpoints_run ON ext_langgraph_checkpoints (run_id);
CREATE TABLE ext_langgraph_blobs (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    channel       TEXT NOT NULL,
    version       TEXT NOT NULL,
    type          TEXT NOT NULL,
    base_version  TEXT,
    keep          INTEGER NOT NULL DEFAULT 0,
    depth         INTEGER NOT NULL DEFAULT 0,
    digest        {blob},
    data          {blob},
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE TABLE ext_langgraph_writes (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    channel       TEXT NOT NULL,
    type          TEXT NOT NULL,
    value         {blob},
    task_path     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
)
"""

MIGRATIONS = [
    Migration(
        1,
        sqlite=_TABLES.format(blob="BLOB", json="TEXT"),
        postgres=_TABLES.format(blob="BYTEA", json="JSONB"),
    ),
]

# -- checkpoints ------------------------------------------------------------------------------

PUT_CHECKPOINT = """
INSERT INTO ext_langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, run_id, type, checkpoint, metadata)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :parent_checkpoint_id, :run_id, :type,
    :checkpoint, {metadata})
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id,
    type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata
"""
PUT_CHECKPOINT_SQLITE = PUT_CHECKPOINT.format(metadata=":metadata")
PUT_CHECKPOINT_POSTGRES = PUT_CHECKPOINT.format(metadata="CAST(:metadata AS jsonb)")

CHECKPOINT_COLUMNS = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
    "{metadata} FROM ext_langgraph_checkpoints"
)
COLUMNS_SQLITE = CHECKPOINT_COLUMNS.format(metadata="metadata")
COLUMNS_POSTGRES = CHECKPOINT_COLUMNS.format(metadata="CAST(metadata AS TEXT)")

# list()'s conditions, joined by AND as the call asks for them
BY_THREAD = "thread_id = :thread_id"
BY_NS = "checkpoint_ns = :checkpoint_ns"
BY_ID = "checkpoint_id = :checkpoint_id"
BEFORE = "checkpoint_id < :before"
METADATA_SQLITE = "json_extract(metadata, :path{i}) = :value{i}"
METADATA_NULL_SQLITE = "json_extract(metadata, :path{i}) IS NULL"
METADATA_POSTGRES = "metadata @> CAST(:filter AS jsonb)"
NEWEST_FIRST = " ORDER BY checkpoint_id DESC"
LIMIT = " LIMIT :limit"


def search(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
    *,
    postgres: bool,
) -> tuple[str, dict[str, Any]]:
    """list()'s query and parameters."""
    conditions: list[str] = []
    params: dict[str, Any] = {}
    if config is not None:
        conf = config["configurable"]
        conditions.append(BY_THREAD)
        params["thread_id"] = str(conf["thread_id"])
        if conf.get("checkpoint_ns") is not None:
            conditions.append(BY_NS)
            params["checkpoint_ns"] = conf["checkpoint_ns"]
        if checkpoint_id := get_checkpoint_id(config):
            conditions.append(BY_ID)
            params["checkpoint_id"] = checkpoint_id
    if filter and postgres:
        conditions.append(METADATA_POSTGRES)
        params["filter"] = json.dumps(filter)
    elif filter:
        for i, (key, value) in enumerate(filter.items()):
            if '"' in key:
                raise ValueError(f"metadata filter key {key!r}: quotes are not allowed")
            params[f"path{i}"] = f'$."{key}"'
            if value is None:
                conditions.append(METADATA_NULL_SQLITE.format(i=i))
                continue
            conditions.append(METADATA_SQLITE.format(i=i))
            params[f"value{i}"] = _sqlite_json_value(value)
    if before is not None and (before_id := get_checkpoint_id(before)):
        conditions.append(BEFORE)
        params["before"] = before_id
    sql = COLUMNS_POSTGRES if postgres else COLUMNS_SQLITE
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    sql += NEWEST_FIRST
    if limit is not None:
        sql += LIMIT
        params["limit"] = max(int(limit), 0)
    return sql, params


def _sqlite_json_value(value: Any) -> Any:
    """A filter value as SQLite's ``json_extract`` returns the stored one."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


# -- channel values ---------------------------------------------------------------------------

PUT_BLOB = """
INSERT INTO ext_langgraph_blobs (thread_id, checkpoint_ns, channel, version, type,
    base_version, keep, depth, digest, data)
VALUES (:thread_id, :checkpoint_ns, :channel, :version, :type, :base_version, :keep, :depth,
    :digest, :data)
ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
"""

# A list version that a new one may extend: how deep its chain is, and what it holds.
BLOB_BASE = """
SELECT depth, digest FROM ext_langgraph_blobs
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND channel = :channel
  AND version = :version
"""

# The value of one channel version: its row and, for a link, the links below it, root first.
BLOB_CHAIN = """
WITH RECURSIVE chain (version, base_version, type, keep, data, up) AS (
    SELECT version, base_version, type, keep, data, 0 FROM ext_langgraph_blobs
    WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND channel = :channel
      AND version = :version
  UNION ALL
    SELECT b.version, b.base_version, b.type, b.keep, b.data, chain.up + 1
    FROM ext_langgraph_blobs b JOIN chain ON b.version = chain.base_version
    WHERE b.thread_id = :thread_id AND b.checkpoint_ns = :checkpoint_ns
      AND b.channel = :channel AND chain.up < :max_depth
)
SELECT type, keep, data FROM chain ORDER BY up DESC
"""

BLOB_TYPE = """
SELECT type FROM ext_langgraph_blobs
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND channel = :channel
  AND version = :version
"""

BLOB_EDGES = """
SELECT channel, version, base_version FROM ext_langgraph_blobs
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
"""

DELETE_BLOB = """
DELETE FROM ext_langgraph_blobs
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND channel = :channel
  AND version = :version
"""

# -- writes -----------------------------------------------------------------------------------

PUT_WRITE = """
INSERT INTO ext_langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
    channel, type, value, task_path)
VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :idx, :channel, :type, :value,
    :task_path)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO {action}
"""
ADD_WRITE = PUT_WRITE.format(action="NOTHING")
SET_WRITE = PUT_WRITE.format(
    action="UPDATE SET channel = excluded.channel, type = excluded.type, "
    "value = excluded.value, task_path = excluded.task_path"
)

WRITES_OF = """
SELECT task_id, channel, type, value, task_path, idx FROM ext_langgraph_writes
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
  AND checkpoint_id = :checkpoint_id
"""

# -- threads ----------------------------------------------------------------------------------

DELETE_THREAD = [
    "DELETE FROM ext_langgraph_writes WHERE thread_id = :thread_id",
    "DELETE FROM ext_langgraph_blobs WHERE thread_id = :thread_id",
    "DELETE FROM ext_langgraph_checkpoints WHERE thread_id = :thread_id",
]

COPY_THREAD = [
    """INSERT INTO ext_langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
        parent_checkpoint_id, run_id, type, checkpoint, metadata)
    SELECT :target, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type,
        checkpoint, metadata FROM ext_langgraph_checkpoints WHERE thread_id = :source
    ON CONFLICT DO NOTHING""",
    """INSERT INTO ext_langgraph_blobs (thread_id, checkpoint_ns, channel, version, type,
        base_version, keep, depth, digest, data)
    SELECT :target, checkpoint_ns, channel, version, type, base_version, keep, depth, digest,
        data
    FROM ext_langgraph_blobs WHERE thread_id = :source
    ON CONFLICT DO NOTHING""",
    """INSERT INTO ext_langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
        idx, channel, type, value, task_path)
    SELECT :target, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value,
        task_path FROM ext_langgraph_writes WHERE thread_id = :source
    ON CONFLICT DO NOTHING""",
]

NAMESPACES_OF = """
SELECT DISTINCT checkpoint_ns FROM ext_langgraph_checkpoints WHERE thread_id = :thread_id
"""

CHECKPOINTS_OF_RUN = """
SELECT thread_id, checkpoint_ns, checkpoint_id FROM ext_langgraph_checkpoints
WHERE run_id = :run_id
"""

# A namespace's checkpoints, newest first, with what pruning needs to walk their parents.
LINEAGE = """
SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint, {metadata}
FROM ext_langgraph_checkpoints
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns ORDER BY checkpoint_id DESC
"""
LINEAGE_SQLITE = LINEAGE.format(metadata="metadata")
LINEAGE_POSTGRES = LINEAGE.format(metadata="CAST(metadata AS TEXT)")

DELETE_CHECKPOINT = [
    """DELETE FROM ext_langgraph_writes WHERE thread_id = :thread_id
        AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id""",
    """DELETE FROM ext_langgraph_checkpoints WHERE thread_id = :thread_id
        AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id""",
]
