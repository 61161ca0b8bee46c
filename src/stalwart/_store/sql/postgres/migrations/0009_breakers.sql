-- Circuit breakers shared by the fleet: one row per breaker (its state, when it opened, when a
-- probe may start, which attempt holds the probe and until when) and the failed attempts of
-- its sliding window. Runs waiting on an open breaker are found by what they wait for, to be
-- woken when it closes. Expand-only: code of schema version 8 ignores the tables.
CREATE TABLE breakers (
    name           TEXT PRIMARY KEY,
    state          TEXT NOT NULL,
    window_seconds DOUBLE PRECISION NOT NULL,
    opened_at      DOUBLE PRECISION,
    retry_at       DOUBLE PRECISION,
    probe_owner    TEXT,
    probe_until    DOUBLE PRECISION,
    updated_at     DOUBLE PRECISION NOT NULL
);
CREATE TABLE breaker_failures (
    name TEXT NOT NULL,
    at   DOUBLE PRECISION NOT NULL
);
CREATE INDEX breaker_failures_by_name ON breaker_failures (name, at);
CREATE INDEX runs_waiting_for ON runs (waiting_for) WHERE status = 'suspended';
