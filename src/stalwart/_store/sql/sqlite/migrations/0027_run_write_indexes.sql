-- Fewer index pages a run's writes touch (docs/performance.md, "One run, one step"): a
-- one-step run added 27-28 pages to the write-ahead log, most of them index leaves of runs.
-- runs_by_created (created_at) is the prefix of runs_by_created_name (0025), which serves
-- every read it served. terminal_runs_by_update (updated_at, 0022) is the prefix of
-- runs_ended (0025), with the same condition: prune reads runs_ended now. runs_by_wake holds
-- only the runs with a wake-up time (timers, retries, event deadlines: what it is searched
-- by), and runs_by_parent only child runs: a run without either costs them nothing, where
-- every run's creation wrote both and its end moved its runs_by_wake entry. journal_by_run
-- keys the journal by (workflow_id) alone: an index entry ends in the row's rowid, which is
-- id, so it kept id twice; the order and ranges on id are the same (rowid), and each entry
-- is about 9 bytes narrower, so its leaves split less often.
-- Release 0.2 (schema 15) names no index, so it keeps serving the store: oldest-compatible
-- is left alone. Code of schemas 22 to 26, never released, names terminal_runs_by_update
-- (INDEXED BY, SQLite's prune candidates), and its prune fails on the migrated store with
-- "no such index": upgrade such a checkout with the store.
DROP INDEX runs_by_created;
DROP INDEX terminal_runs_by_update;
DROP INDEX runs_by_wake;
CREATE INDEX runs_by_wake ON runs (status, wake_at) WHERE wake_at IS NOT NULL;
DROP INDEX runs_by_parent;
CREATE INDEX runs_by_parent ON runs (parent_id, created_at, workflow_id)
    WHERE parent_id IS NOT NULL;
DROP INDEX journal_by_run;
CREATE INDEX journal_by_run ON journal (workflow_id);
