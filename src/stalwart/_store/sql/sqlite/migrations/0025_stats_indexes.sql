-- The console's overview (GET /api/v1/stats) reads a window of recent history, never all of
-- it: the step attempts started since a time (journal_steps: the step rows only, with every
-- column the latency and failure counts read, kind too, which SQLite would otherwise read from
-- each row), the runs that ended since a time (runs_ended: the ended runs only, by when they
-- last changed), and the runs created since a time by workflow name (runs_by_created_name:
-- their name and key beside the time, so a run's spend is found without reading the run).
-- Expand-only: older code names no index. Each costs a write an index entry: journal_steps a
-- step row's, runs_ended a run's end.
CREATE INDEX journal_steps ON journal (started_at, name, status, attempt, finished_at, kind)
    WHERE kind = 'step';
CREATE INDEX runs_ended ON runs (updated_at, status)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_by_created_name ON runs (created_at, name, workflow_id);
