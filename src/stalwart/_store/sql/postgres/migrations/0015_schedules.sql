-- Schedules kept in the store, so any process of an app may declare one and every worker of
-- the fleet fires it: the workflow and arguments of its runs, its cron expression, time zone
-- and catch-up policy, the last tick it handled (started or skipped; at first, when it was
-- declared), and when a worker should next look at it (next_due, indexed: the one query a
-- worker asks for due schedules). revision counts declarations, so a worker that planned a
-- tick under an old declaration loses its compare-and-set. Expand-only: older code ignores it.
CREATE TABLE schedules (
    name        TEXT PRIMARY KEY,
    workflow    TEXT NOT NULL,
    cron        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    catch_up    TEXT NOT NULL,
    input       BYTEA NOT NULL,
    last_tick   DOUBLE PRECISION NOT NULL,
    next_due    DOUBLE PRECISION NOT NULL,
    revision    INTEGER NOT NULL,
    declared_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX schedules_by_next_due ON schedules (next_due);
