-- Durable waits: timers, events and approvals live in the store; a suspended run holds no lease.
-- Expand-only: code of schema version 2 ignores the new columns and tables.
ALTER TABLE runs ADD COLUMN wake_at DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN waiting_for TEXT;
ALTER TABLE runs ADD COLUMN deadline DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_wake ON runs (status, wake_at);

CREATE TABLE events (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id  TEXT NOT NULL,
    name         TEXT NOT NULL,
    payload      BYTEA,
    dedup_key    TEXT,
    sent_at      DOUBLE PRECISION NOT NULL,
    by           TEXT,
    consumed_seq INTEGER
);
CREATE INDEX events_unconsumed ON events (workflow_id, name, consumed_seq, id);
CREATE UNIQUE INDEX events_dedup ON events (workflow_id, dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE approvals (
    workflow_id  TEXT NOT NULL,
    approval_id  TEXT NOT NULL,
    subject      TEXT NOT NULL,
    details      BYTEA,
    requested_at DOUBLE PRECISION NOT NULL,
    expires_at   DOUBLE PRECISION,
    decided_at   DOUBLE PRECISION,
    approved     INTEGER,
    by           TEXT,
    reason       TEXT,
    PRIMARY KEY (workflow_id, approval_id)
);
CREATE INDEX approvals_pending ON approvals (decided_at, requested_at);
