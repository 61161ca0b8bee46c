-- A run page counts its child runs by status: the children of one parent, by status, from an
-- index that holds only child runs (most runs have no parent, and cost it nothing), where
-- runs_by_parent left the status to each row and SQLite walked a status's every run instead.
CREATE INDEX runs_children_by_status ON runs (parent_id, status) WHERE parent_id IS NOT NULL;
-- The run list of a workflow under a second filter (its runs of one queue, or of one status):
-- the name's index carries queue and status (INCLUDE), so PostgreSQL filters them inside the
-- index and reads a page's keys without a heap read, where it walked runs_by_created and
-- filtered every newer run. It replaces runs_by_name_created, a prefix of it.
CREATE INDEX runs_by_name_created_covering ON runs (name, created_at, workflow_id)
    INCLUDE (queue, status);
DROP INDEX runs_by_name_created;
