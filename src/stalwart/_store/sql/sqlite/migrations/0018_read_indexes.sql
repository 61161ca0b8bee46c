-- The approvals inbox (the undecided requests, oldest first) and the list of every request read
-- in their order from an index instead of sorted: the undecided ones from a partial index that
-- holds only them, so the decided history a store piles up never slows the inbox. Expand-only:
-- no query of older code names an index.
CREATE INDEX approvals_undecided ON approvals (requested_at, workflow_id, approval_id)
    WHERE decided_at IS NULL;
CREATE INDEX approvals_by_requested ON approvals (requested_at, workflow_id, approval_id);
-- A run page counts its child runs by status: the children of one parent, by status, from an
-- index that holds only child runs (most runs have no parent, and cost it nothing), where
-- runs_by_parent left the status to each row and SQLite walked a status's every run instead.
CREATE INDEX runs_children_by_status ON runs (parent_id, status) WHERE parent_id IS NOT NULL;
