-- SQLite's text of the `-- dialect:` queries of ../queries.sql (`-- name: x`, one for each).

-- name: create_run
INSERT INTO runs (workflow_id, name, status, queue, priority, input, created_at, updated_at,
                  lease_owner, lease_expires_at, deadline, trace_context)
VALUES (:workflow_id, :name, :status, :queue, :priority, :input, round(:now, 6), :now,
        :owner, :lease_until, :deadline, :trace_context)
ON CONFLICT (workflow_id) DO NOTHING;

-- name: take_lease
UPDATE runs
SET lease_owner = :owner, lease_expires_at = :lease_until, status = 'running',
    updated_at = :now, recoveries = :recoveries, recovery_mark = :recovery_mark,
    wake_at = NULL, waiting_for = NULL
WHERE workflow_id = :workflow_id AND lease_owner IS :expected_owner AND {{claimable}};

-- name: append_entry_if_owner
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
SELECT :workflow_id, :seq, :position, :kind, :name, :status, :attempt, :started_at,
       :finished_at, :input, :output, :error, :by, :compensable, :call_id, :usage
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = :workflow_id AND lease_owner = :owner);

-- name: get_payloads
-- The store writes one `?` per digest in place of :digests.
SELECT digest, data FROM payloads WHERE digest IN (:digests);

-- name: approvals_of_runs
SELECT workflow_id, approval_id, subject, details, requested_at, expires_at, decided_at,
       approved, by, reason
FROM approvals WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: claim_candidates
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, trace_context, parent_id
FROM runs
WHERE name IN (SELECT value FROM json_each(:names))
  AND queue IN (SELECT value FROM json_each(:queues))
  AND {{claimable}}
ORDER BY CASE status WHEN 'running' THEN 0 WHEN 'suspended' THEN 1 ELSE 2 END,
         priority DESC, created_at
LIMIT :limit;

-- name: held_on_host
SELECT workflow_id, lease_owner FROM runs
WHERE status = 'running' AND lease_owner LIKE :host_prefix
  AND name IN (SELECT value FROM json_each(:names));

-- name: next_wake
SELECT min(wake_at) FROM runs WHERE status = 'suspended' AND wake_at IS NOT NULL
  AND name IN (SELECT value FROM json_each(:names))
  AND queue IN (SELECT value FROM json_each(:queues));

-- name: lock_breaker
SELECT 1;  -- writers are serial (BEGIN IMMEDIATE)

-- name: create_child_run
-- A child run, started by its parent (whose lease the caller checked in the same transaction).
INSERT INTO runs (workflow_id, name, status, queue, priority, input, created_at, updated_at,
                  deadline, trace_context, parent_id, detached)
VALUES (:workflow_id, :name, 'pending', :queue, 0, :input, round(:now, 6), :now,
        :deadline, :trace_context, :parent_id, :detached)
ON CONFLICT (workflow_id) DO NOTHING;

-- name: lock_shared
-- Serialize the writers of one key, so a writer reads the version the last one committed.
SELECT 1;  -- writers are serial (BEGIN IMMEDIATE)

-- name: declare_schedule
-- A new schedule starts counting ticks from its declaration; declaring it again keeps its last
-- tick and makes it due now, so a worker plans its next tick under the new declaration. A new
-- cron or time zone counts from the declaration too: ticks it would have had before it was
-- declared were never due (else a denser cron would start a burst of catch-up runs).
INSERT INTO schedules (name, workflow, cron, timezone, catch_up, input, last_tick, next_due,
                       revision, declared_at)
VALUES (:name, :workflow, :cron, :timezone, :catch_up, :input, :now, :next_due, 1, :now)
ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, cron = excluded.cron,
    timezone = excluded.timezone, catch_up = excluded.catch_up, input = excluded.input,
    last_tick = CASE WHEN schedules.cron = excluded.cron
                      AND schedules.timezone = excluded.timezone THEN schedules.last_tick
                     ELSE MAX(schedules.last_tick, excluded.declared_at) END,
    next_due = excluded.declared_at, revision = schedules.revision + 1,
    declared_at = excluded.declared_at;

-- name: next_schedule_due
SELECT next_due FROM schedules WHERE workflow IN (SELECT value FROM json_each(:names)) ORDER BY next_due LIMIT 1;

-- name: due_schedules
SELECT name, workflow, cron, timezone, catch_up, input, last_tick, next_due, revision,
       declared_at
FROM schedules WHERE next_due <= :now AND workflow IN (SELECT value FROM json_each(:names))
ORDER BY next_due, name;

-- name: chunk_held
-- Writers are serial (BEGIN IMMEDIATE): no delete can come between this and the commit.
SELECT 1 FROM snapshot_chunks WHERE digest = :digest;

-- name: append_chunk
INSERT INTO stream_chunks (workflow_id, stream, "offset", seq, attempt, origin, data, at)
SELECT :workflow_id, :stream, COALESCE(MAX(c."offset"), -1) + 1, :seq, :attempt, :origin,
       :data, :at
FROM stream_chunks c WHERE c.workflow_id = :workflow_id AND c.stream = :stream
ON CONFLICT (workflow_id, origin) DO NOTHING;
