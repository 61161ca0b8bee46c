-- Which retry of which step began last (``seq:attempt``), so a recovery charges an attempt that
-- a crash interrupted but not the backoff before it. Kept on the run, out of the journal.
-- Expand-only: code of schema version 6 ignores the column.
ALTER TABLE runs ADD COLUMN retrying TEXT;

-- Which call wrote a journal entry: a write retried after a lost connection looks for its own
-- entry before doing anything again. Expand-only: code of schema version 6 leaves it empty.
ALTER TABLE journal ADD COLUMN call_id TEXT;
