-- The workflows each worker serves (JSON list), so that a schedule counts only the workers
-- that could have started its ticks as running (docs/schedules.md). Expand-only: code of
-- schema version 15 ignores it, and a row it writes has none (counted for every workflow).
ALTER TABLE workers ADD COLUMN workflows TEXT;
