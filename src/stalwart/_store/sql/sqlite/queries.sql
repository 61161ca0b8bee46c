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
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, trace_context, parent_id
FROM runs
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

-- name: prunable_runs
-- INDEXED BY: the planner would take a status index and sort every ended run.
SELECT r.workflow_id FROM runs r INDEXED BY runs_ended
WHERE r.status IN ('completed', 'failed', 'cancelled') AND r.updated_at < :before
  AND (:status IS NULL OR r.status = :status) AND (:name IS NULL OR r.name = :name)
  AND r.name NOT IN (SELECT value FROM json_each(:exclude))
  AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.workflow_id
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
  AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.workflow_id = r.parent_id
                  AND p.status NOT IN ('completed', 'cancelled'))
ORDER BY r.updated_at LIMIT :limit;

-- name: count_prunable
SELECT count(*) FROM runs r
WHERE r.status IN ('completed', 'failed', 'cancelled') AND r.updated_at < :before
  AND (:status IS NULL OR r.status = :status) AND (:name IS NULL OR r.name = :name)
  AND r.name NOT IN (SELECT value FROM json_each(:exclude))
  AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.workflow_id
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
  AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.workflow_id = r.parent_id
                  AND p.status NOT IN ('completed', 'cancelled'));

-- name: delete_runs
-- The unary + keeps the planner on the primary key: on status it would read every ended run.
DELETE FROM runs
WHERE workflow_id IN (SELECT value FROM json_each(:ids))
  AND +status IN ('completed', 'failed', 'cancelled') AND +updated_at < :before
  AND (:status IS NULL OR +status = :status) AND (:name IS NULL OR +name = :name)
  AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = runs.workflow_id
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
  AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.workflow_id = runs.parent_id
                  AND p.status NOT IN ('completed', 'cancelled'))
RETURNING workflow_id;

-- name: delete_journal
DELETE FROM journal WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_events
DELETE FROM events WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_approvals
DELETE FROM approvals WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_run_spend
DELETE FROM run_spend WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_run_calls
DELETE FROM run_calls WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_run_spend_steps
DELETE FROM run_spend_steps WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_snapshot_uses
DELETE FROM snapshot_uses
WHERE snapshot_id IN (SELECT id FROM snapshots WHERE workflow_id IN (SELECT value FROM json_each(:ids)));

-- name: delete_snapshot_files
DELETE FROM snapshot_files
WHERE snapshot_id IN (SELECT id FROM snapshots WHERE workflow_id IN (SELECT value FROM json_each(:ids)));

-- name: delete_snapshots
DELETE FROM snapshots WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_stream_chunks
DELETE FROM stream_chunks WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: payload_graph
SELECT digest, touched_at,
       CASE WHEN substr(data, 1, 1) IN (x'4d', x'51', x'54', x'55', x'56') THEN data ELSE substr(data, 1, 33) END AS head,
       refs
FROM payloads;

-- name: payload_references
SELECT input AS ref FROM runs WHERE substr(input, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT output AS ref FROM runs WHERE substr(output, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT progress AS ref FROM runs WHERE substr(progress, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT input AS ref FROM journal WHERE substr(input, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT output AS ref FROM journal WHERE substr(output, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT payload AS ref FROM events WHERE substr(payload, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT details AS ref FROM approvals WHERE substr(details, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT value AS ref FROM shared_writes WHERE substr(value, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT input AS ref FROM schedules WHERE substr(input, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56')
UNION ALL SELECT input AS ref FROM run_calls WHERE substr(input, 1, 1) IN (x'48', x'4d', x'51', x'54', x'55', x'56');

-- name: payload_touched
SELECT touched_at FROM payloads WHERE digest = :digest;

-- name: unused_chunks
SELECT digest FROM snapshot_chunks c
WHERE created_at < :before
  AND NOT EXISTS (SELECT 1 FROM snapshot_uses u WHERE u.digest = c.digest)
LIMIT :limit;

-- name: stats_started
SELECT CAST((created_at - :since) / :width AS INTEGER) AS bucket, count(*) AS runs
FROM runs WHERE created_at >= :since
GROUP BY bucket ORDER BY bucket;

-- name: stats_finished
SELECT CAST((updated_at - :since) / :width AS INTEGER) AS bucket, status, count(*) AS runs
FROM runs INDEXED BY runs_ended
WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= :since
GROUP BY bucket, status ORDER BY bucket, status;

-- name: stats_workflows
SELECT runs.name, count(*) AS runs,
       coalesce(sum(run_spend.input_tokens), 0) AS input_tokens,
       coalesce(sum(run_spend.output_tokens), 0) AS output_tokens,
       coalesce(sum(run_spend.cost), 0) AS cost
FROM runs INDEXED BY runs_by_created_name
LEFT JOIN run_spend ON run_spend.workflow_id = runs.workflow_id
WHERE runs.created_at >= :since
GROUP BY runs.name
ORDER BY runs.name;
