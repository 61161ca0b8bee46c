-- Workspace snapshots (docs/snapshots.md). snapshot_chunks is content-addressed: a chunk of a
-- file, keyed by the SHA-256 of its bytes, stored once per store, zstd-compressed (`size` is its
-- length before compression). A snapshot is a row of `snapshots`, keyed by its id and found by
-- its run (`workflow_id`; `number` counts its snapshots 1, 2, ...), complete once `complete` is
-- 1 (a snapshot a crash interrupted stays 0, visible to nobody, and goes with its run). Its tree
-- is one row per entry in `snapshot_files` (`kind` file, dir or link; a file's `chunks` are the
-- digests of its chunks in order, 32 bytes each; a link's `target`), and `snapshot_uses` names
-- every chunk the snapshot uses, written in the same transaction that checks the chunk is
-- stored: a chunk no use row names is garbage. Every row carries or reaches its run. Expand-
-- only: older code ignores the tables.
-- A rowid table, unlike the small-row tables: SQLite writes a big row into a rowid table's
-- overflow pages half again as fast as into a WITHOUT ROWID one.
CREATE TABLE snapshot_chunks (
    id         INTEGER PRIMARY KEY,
    digest     BLOB NOT NULL UNIQUE,
    size       INTEGER NOT NULL,
    created_at REAL NOT NULL,
    data       BLOB NOT NULL
);
CREATE TABLE snapshots (
    id           TEXT PRIMARY KEY,
    workflow_id  TEXT NOT NULL,
    number       INTEGER NOT NULL,
    name         TEXT NOT NULL,
    files        INTEGER NOT NULL DEFAULT 0,
    bytes        INTEGER NOT NULL DEFAULT 0,
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    created_at   REAL NOT NULL,
    complete     INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX snapshots_by_run ON snapshots (workflow_id, number);
CREATE INDEX snapshots_by_name ON snapshots (workflow_id, name, number);
CREATE TABLE snapshot_files (
    snapshot_id TEXT NOT NULL,
    path        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    mode        INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    target      TEXT,
    chunks      BLOB,
    PRIMARY KEY (snapshot_id, path)
) WITHOUT ROWID;
CREATE TABLE snapshot_uses (
    snapshot_id TEXT NOT NULL,
    digest      BLOB NOT NULL,
    PRIMARY KEY (snapshot_id, digest)
) WITHOUT ROWID;
CREATE INDEX snapshot_uses_by_chunk ON snapshot_uses (digest);
