-- The shared context: every write of a key is a row, unique on (key, version), so two writers
-- can never both make one version (a lost update is a primary-key violation, never a silent
-- overwrite); the latest row is the key's value. `by` is the writing run's id or the client's
-- name; `call_id` lets a write retried after a lost acknowledgement find itself. Values
-- larger than the inline limit live in payloads, like journal payloads. Expand-only: older code
-- ignores the table.
CREATE TABLE shared_writes (
    key     TEXT NOT NULL,
    version INTEGER NOT NULL,
    value   BLOB NOT NULL,
    by      TEXT NOT NULL,
    at      REAL NOT NULL,
    call_id TEXT,
    PRIMARY KEY (key, version)
) WITHOUT ROWID;
