-- Durable streams: what a run emits (stalwart.emit), an append-only table keyed by the run, the
-- stream and the chunk's offset (0, 1, 2, ... per run and stream, given at insert as the
-- stream's last offset plus one, so offsets are gap-free in commit order). seq and attempt
-- name the step attempt that emitted it (NULL seq: workflow code). origin names the emit
-- itself (a step attempt's own counter, or workflow code's journal position), unique per
-- run, so a batch retried after a lost acknowledgement, or workflow code replayed, writes
-- nothing again. at is when it was emitted (epoch seconds). Expand-only: older code ignores
-- the table.
CREATE TABLE stream_chunks (
    workflow_id TEXT NOT NULL,
    stream      TEXT NOT NULL,
    "offset"    INTEGER NOT NULL,
    seq         INTEGER,
    attempt     INTEGER NOT NULL,
    origin      TEXT NOT NULL,
    data        BLOB NOT NULL,
    at          REAL NOT NULL,
    PRIMARY KEY (workflow_id, stream, "offset")
) WITHOUT ROWID;
CREATE UNIQUE INDEX stream_chunks_origin ON stream_chunks (workflow_id, origin);
