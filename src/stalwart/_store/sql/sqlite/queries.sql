-- name: schema_table
CREATE TABLE IF NOT EXISTS stalwart_schema (
    version           INTEGER NOT NULL,
    oldest_compatible INTEGER NOT NULL
);

-- name: schema_version
SELECT version, oldest_compatible FROM stalwart_schema ORDER BY version DESC LIMIT 1;

-- name: set_schema_version
INSERT INTO stalwart_schema (version, oldest_compatible) VALUES (:version, :oldest_compatible);

-- name: create_run
INSERT INTO runs (workflow_id, name, status, queue, priority, input, created_at, updated_at,
                  lease_owner, lease_expires_at)
VALUES (:workflow_id, :name, :status, :queue, :priority, :input, :now, :now,
        :owner, :lease_until)
ON CONFLICT (workflow_id) DO NOTHING;

-- name: get_run
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at
FROM runs WHERE workflow_id = :workflow_id;

-- name: take_lease
UPDATE runs
SET lease_owner = :owner, lease_expires_at = :lease_until, status = 'running',
    updated_at = :now, recoveries = :recoveries, recovery_mark = :recovery_mark
WHERE workflow_id = :workflow_id
  AND status IN ('pending', 'running')
  AND lease_owner IS :expected_owner;

-- name: recovery_state
SELECT recoveries, recovery_mark,
       (SELECT count(*) FROM journal
        WHERE journal.workflow_id = runs.workflow_id AND seq IS NOT NULL
          AND status = 'completed') AS progress
FROM runs WHERE workflow_id = :workflow_id;

-- name: renew_lease
UPDATE runs SET lease_expires_at = :lease_until
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: record_progress
UPDATE runs SET lease_expires_at = :lease_until, progress = :progress, updated_at = :now
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: finish_run
UPDATE runs
SET status = :status, output = :output, error = :error, updated_at = :now,
    lease_owner = NULL, lease_expires_at = NULL
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: append_entry_if_owner
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by)
SELECT :workflow_id, :seq, :position, :kind, :name, :status, :attempt, :started_at,
       :finished_at, :input, :output, :error, :by
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = :workflow_id AND lease_owner = :owner);

-- name: append_entry
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by)
VALUES (:workflow_id, :seq, :position, :kind, :name, :status, :attempt, :started_at,
        :finished_at, :input, :output, :error, :by);

-- name: put_payload
INSERT INTO payloads (digest, data) VALUES (:digest, :data) ON CONFLICT (digest) DO NOTHING;

-- name: get_payload
SELECT data FROM payloads WHERE digest = :digest;

-- name: replay_index
SELECT seq, position, kind, name, status, attempt, output, error
FROM journal
WHERE workflow_id = :workflow_id AND seq IS NOT NULL
ORDER BY id;

-- name: journal
SELECT id, seq, kind, name, status, attempt, started_at, finished_at, input, output, error, by
FROM journal WHERE workflow_id = :workflow_id ORDER BY id;

-- name: list_runs
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at
FROM runs
WHERE (:status IS NULL OR status = :status)
  AND (:name IS NULL OR name = :name)
  AND (:before IS NULL OR created_at < :before)
ORDER BY created_at DESC, workflow_id DESC
LIMIT :limit;
