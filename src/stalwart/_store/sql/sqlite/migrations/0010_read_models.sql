-- Read models for operators: the step a run executes now (as its holder last published it,
-- JSON: name, seq, attempt, started_at), the queues apps declare with their limits, and the
-- workers serving the store, each refreshed by its lease renewals. Expand-only: code of
-- schema version 9 ignores them.
ALTER TABLE runs ADD COLUMN current_step TEXT;
CREATE TABLE queues (
    name        TEXT PRIMARY KEY,
    concurrency INTEGER,
    rate        INTEGER,
    period      REAL NOT NULL,
    declared_at REAL NOT NULL
);
CREATE TABLE workers (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    queues     TEXT NOT NULL,
    started_at REAL NOT NULL,
    seen_at    REAL NOT NULL,
    running    INTEGER NOT NULL
);
