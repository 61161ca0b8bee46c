-- Fewer index entries a run's writes touch (docs/performance.md, "One run, one step"): every
-- run's creation wrote an entry in each index of runs, and its end moved those holding its
-- status or updated_at. runs_by_created (created_at) is the key of runs_by_created_name (0025),
-- which serves every read it served, read backwards for newest first. runs_by_name_created is
-- runs_by_name_created_covering (0017) without its INCLUDE. terminal_runs_by_update (updated_at,
-- 0022) is the key of runs_ended (0025), with the same condition. runs_by_parent holds only
-- child runs: a run without a parent costs it nothing. runs_by_wake stays whole here (SQLite's
-- holds only runs with a wake-up time): PostgreSQL's planner counts the runs of a status, and
-- all runs, by an index-only scan of it, its narrowest index that leads with the status, and
-- those counts took about twice as long on runs_by_status (bench/console_reads.py, one loaded
-- sitting).
-- No query names an index on PostgreSQL, so every older release keeps serving the store (its
-- plans pick the indexes left): oldest-compatible is left alone.
DROP INDEX runs_by_created;
DROP INDEX runs_by_name_created;
DROP INDEX terminal_runs_by_update;
DROP INDEX runs_by_parent;
CREATE INDEX runs_by_parent ON runs (parent_id, created_at, workflow_id)
    WHERE parent_id IS NOT NULL;
