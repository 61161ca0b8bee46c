-- Payload garbage collection on an encrypted store (docs/lifecycle.md, "How garbage is
-- collected safely"). refs lists, in clear, the keys of the rows a sealed payloads row refers
-- to (each a length byte then the key: tree nodes list their children, a piece compressed
-- against another row names that row), written with the row; the keys are HMACs under the
-- digest key, so they reveal nothing a sealed row hides. NULL on a row stored in plaintext
-- (its own bytes say what it refers to) and on a sealed row written before this migration,
-- whose references only its key can tell: while one is left the collector deletes no payload
-- row. Expand-only: older code neither reads nor writes it.
ALTER TABLE payloads ADD COLUMN refs BYTEA;
