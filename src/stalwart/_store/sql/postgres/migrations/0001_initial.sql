-- The first schema: runs, their journal, and content-addressed payloads.
CREATE TABLE runs (
    workflow_id      TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    status           TEXT NOT NULL,
    queue            TEXT NOT NULL DEFAULT 'default',
    priority         INTEGER NOT NULL DEFAULT 0,
    input            BYTEA,
    output           BYTEA,
    error            TEXT,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    lease_owner      TEXT,
    lease_expires_at DOUBLE PRECISION,
    progress         BYTEA
);
CREATE INDEX runs_by_created ON runs (created_at DESC);
CREATE INDEX runs_by_status ON runs (status, queue, priority DESC, created_at);

CREATE TABLE journal (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    seq         INTEGER,
    position    TEXT,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    status      TEXT NOT NULL,
    attempt     INTEGER,
    started_at  DOUBLE PRECISION,
    finished_at DOUBLE PRECISION,
    input       BYTEA,
    output      BYTEA,
    error       TEXT,
    by          TEXT
);
CREATE INDEX journal_by_run ON journal (workflow_id, id);

CREATE TABLE payloads (
    digest BYTEA PRIMARY KEY,
    data   BYTEA NOT NULL
);
