-- What a step attempt used (tokens, cost, model) as JSON, failed attempts included, so that a
-- run's spend can be read and capped. Expand-only: code of schema version 7 leaves it empty.
ALTER TABLE journal ADD COLUMN usage TEXT;
