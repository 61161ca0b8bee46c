-- Encryption at rest: the digest key that addresses content in an encrypted store, wrapped
-- (AES-256-GCM) under each encryption key it was given to. Expand-only: older code never
-- reads it (the first encrypted write raises the oldest compatible version instead).
CREATE TABLE IF NOT EXISTS digest_keys (
    key_id TEXT PRIMARY KEY,
    wrapped BYTEA NOT NULL
);
