-- Durable waits: timers, events and approvals live in the store; a suspended run holds no lease.
-- Expand-only: code of schema version 2 ignores the new columns and tables.
ALTER TABLE runs ADD COLUMN wake_at REAL;
ALTER TABLE runs ADD COLUMN waiting_for TEXT;
ALTER TABLE runs ADD COLUMN deadline REAL;
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_wake ON runs (status, wake_at);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    payload     BLOB,
    dedup_key   TEXT,
    sent_at     REAL NOT NULL,
    by          TEXT,
    consumed_seq INTEGER
);
CREATE INDEX events_unconsumed ON events (workflow_id, name, consumed_seq, id);
CREATE UNIQUE INDEX events_dedup ON events (workflow_id, dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE approvals (
    workflow_id  TEXT NOT NULL,
    approval_id  TEXT NOT NULL,
    subject      TEXT NOT NULL,
    details      BLOB,
    requested_at REAL NOT NULL,
    expires_at   REAL,
    decided_at   REAL,
    approved     INTEGER,
    by           TEXT,
    reason       TEXT,
    PRIMARY KEY (workflow_id, approval_id)
);
CREATE INDEX approvals_pending ON approvals (decided_at, requested_at);
