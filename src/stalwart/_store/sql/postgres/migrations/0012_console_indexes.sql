-- The console's run list filtered by status, name or queue, newest first on
-- (created_at, workflow_id), and its counts of each status under the other filters: an index
-- for each filter, ending in the list's order, so a page reads its rows in order from where it
-- starts instead of filtering every newer run (the unfiltered list has runs_by_created), and
-- one on (name, status) for a workflow's runs of one status, counted or listed (status with
-- queue has runs_by_status). Expand-only: no query of older code names an index.
CREATE INDEX runs_by_status_created ON runs (status, created_at, workflow_id);
CREATE INDEX runs_by_name_created ON runs (name, created_at, workflow_id);
CREATE INDEX runs_by_queue_created ON runs (queue, created_at, workflow_id);
CREATE INDEX runs_by_name_status ON runs (name, status, created_at, workflow_id);
