-- Child runs: the run that started this one (NULL for a run started from outside), so that a
-- parent finds its children (cancel, retry, show) and a child's end wakes its parent, both by
-- index. Expand-only: older code neither writes nor reads the column.
ALTER TABLE runs ADD COLUMN parent_id TEXT;
CREATE INDEX runs_by_parent ON runs (parent_id, created_at, workflow_id);
