-- Detached children (start_child(..., detached=True)): a child that outlives its parent. Its
-- parent's cancel, deadline and retry pass it by; parent_id is still recorded, so show and the
-- console link the two. Expand-only: older code neither writes nor reads the column.
ALTER TABLE runs ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
