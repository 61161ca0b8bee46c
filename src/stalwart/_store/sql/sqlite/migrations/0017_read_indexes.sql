-- A run page counts its child runs by status: the children of one parent, by status, from an
-- index that holds only child runs (most runs have no parent, and cost it nothing), where
-- runs_by_parent left the status to each row and SQLite walked a status's every run instead.
CREATE INDEX runs_children_by_status ON runs (parent_id, status) WHERE parent_id IS NOT NULL;
