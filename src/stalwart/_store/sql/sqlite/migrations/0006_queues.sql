-- Queues: every start of a run in a queue with a rate limit is recorded, so that all workers
-- of a fleet count the same starts. Expand-only: code of schema version 5 ignores the table.
CREATE TABLE queue_starts (
    queue      TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX queue_starts_by_queue ON queue_starts (queue, started_at);
