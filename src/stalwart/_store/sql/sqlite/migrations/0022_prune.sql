-- Retention and prune (docs/lifecycle.md). touched_at is when a payload row was last stored or
-- found stored by a writer (epoch seconds; NULL: before this migration, as old as can be): a
-- writer that finds a row older than the refresh interval refreshes it in the transaction that
-- references it, and the collector deletes only rows that no column references and whose
-- touched_at, read again under lock, is older than its grace window ("How garbage is collected
-- safely"). terminal_runs_by_update holds only ended runs, the ones a prune looks for, so runs
-- under way cost it nothing. Expand-only: older code neither reads nor writes either.
ALTER TABLE payloads ADD COLUMN touched_at REAL;
CREATE INDEX terminal_runs_by_update ON runs (updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
