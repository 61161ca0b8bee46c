-- Compensation: which completed steps have an undo, so a cancel can tell whether a waiting
-- run can end at once or needs a worker to roll it back first.
ALTER TABLE journal ADD COLUMN compensable INTEGER NOT NULL DEFAULT 0;
