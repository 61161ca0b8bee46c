-- A run page counts its child runs by status: the children of one parent, by status, from an
-- index that holds only child runs (most runs have no parent, and cost it nothing), where
-- runs_by_parent left the status to each row and SQLite walked a status's every run instead.
CREATE INDEX runs_children_by_status ON runs (parent_id, status) WHERE parent_id IS NOT NULL;
-- A workflow's runs of one queue, listed newest first: the name's index carries the queue
-- (INCLUDE), so PostgreSQL filters it inside the index and reads a page's keys without a heap
-- read, where it walked runs_by_created and filtered every newer run (all of them, for a pair
-- whose runs are old). It costs what another index of runs costs on a write (an entry for a
-- new row version); runs_by_name_created, a prefix of it, is left for a contracting migration
-- to drop, which evens that out.
CREATE INDEX runs_by_name_created_covering ON runs (name, created_at, workflow_id)
    INCLUDE (queue);
