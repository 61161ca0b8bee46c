-- Poison-run detection: consecutive recoveries that found a run where the last one left it.
-- Expand-only: code of schema version 1 ignores both columns.
ALTER TABLE runs ADD COLUMN recoveries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN recovery_mark INTEGER;
