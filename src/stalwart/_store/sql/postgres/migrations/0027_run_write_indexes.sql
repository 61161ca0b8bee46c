-- Fewer index entries a run's writes touch (docs/performance.md, "One run, one step"): every
-- run's creation wrote an entry in each index of runs, and its end moved those holding its
-- status or updated_at. runs_by_created (created_at) is the key of runs_by_created_name (0025),
-- which serves every read it served, read backwards for newest first. runs_by_name_created is
-- runs_by_name_created_covering (0017) without its INCLUDE. terminal_runs_by_update (updated_at,
-- 0022) is the key of runs_ended (0025), with the same condition. runs_by_wake holds only the
-- runs with a wake-up time (timers, retries, event deadlines: what it is searched by), and
-- runs_by_parent only child runs: a run without either costs them nothing.
-- No query names an index on PostgreSQL, so every older release keeps serving the store (its
-- plans pick the indexes left): oldest-compatible is left alone.
DROP INDEX runs_by_created;
DROP INDEX runs_by_name_created;
DROP INDEX terminal_runs_by_update;
DROP INDEX runs_by_wake;
CREATE INDEX runs_by_wake ON runs (status, wake_at) WHERE wake_at IS NOT NULL;
DROP INDEX runs_by_parent;
CREATE INDEX runs_by_parent ON runs (parent_id, created_at, workflow_id)
    WHERE parent_id IS NOT NULL;
