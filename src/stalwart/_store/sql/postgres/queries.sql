-- PostgreSQL's text of the `-- dialect:` queries of ../queries.sql (`-- name: x`, one for each).
-- `-- own: x` is a query only PostgreSQL's store code runs (its row and advisory locks,
-- its prepared hot path), a name the shared file must not declare.

-- own: lock_migrations
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/stalwart-migrations'));

-- name: create_run
INSERT INTO runs (workflow_id, name, status, queue, priority, input, created_at, updated_at,
                  lease_owner, lease_expires_at, deadline, trace_context)
VALUES (:workflow_id, :name, :status, :queue, :priority, :input, round(CAST(:now AS numeric), 6), :now,
        :owner, :lease_until, :deadline, :trace_context)
ON CONFLICT (workflow_id) DO NOTHING;

-- own: create_run_ahead
-- create_run, sent with the rest of its transaction before any answer is read (see
-- pg_ahead.py): an id that exists fails it, by a division by the zero rows it inserted, and
-- with it the transaction, where create_run inserts no row. The _ahead statements below fail
-- alike where their precondition does not hold, and by nothing else.
WITH made AS (
    INSERT INTO runs (workflow_id, name, status, queue, priority, input, created_at, updated_at,
                      lease_owner, lease_expires_at, deadline, trace_context)
    VALUES (:workflow_id, :name, :status, :queue, :priority, :input,
            round(CAST(:now AS numeric), 6), :now, :owner, :lease_until, :deadline,
            :trace_context)
    ON CONFLICT (workflow_id) DO NOTHING
    RETURNING 1
)
SELECT 1 / count(*) FROM made;

-- own: finish_run_ahead
-- finish_run, sent ahead: a lost lease fails it.
WITH finished AS (
    UPDATE runs
    SET status = :status, output = :output, error = :error, updated_at = :now,
        lease_owner = NULL, lease_expires_at = NULL, current_step = NULL
    WHERE workflow_id = :workflow_id AND lease_owner = :owner AND status = 'running'
    RETURNING 1
)
SELECT 1 / count(*) FROM finished;

-- own: take_lease_ahead
-- take_lease, sent ahead: a run not claimable, held by another than :expected_owner, or
-- locked by another claimant right now (not waited for) fails it.
WITH taken AS (
    UPDATE runs
    SET lease_owner = :owner, lease_expires_at = :lease_until, status = 'running',
        updated_at = :now, recoveries = 0, recovery_mark = NULL,
        wake_at = NULL, waiting_for = NULL
    WHERE workflow_id = (SELECT workflow_id FROM runs WHERE workflow_id = :workflow_id
                         FOR UPDATE SKIP LOCKED)
      AND lease_owner IS NOT DISTINCT FROM :expected_owner AND {{claimable}}
    RETURNING 1
)
SELECT 1 / count(*) FROM taken;

-- own: claim_in_batch
-- take_lease with its 'resumed' entry as one statement, for a batch of the pipeline whose
-- statements all go out before any answer is read (see pipeline.py): the entry is journaled
-- only where the lease was taken, so the row count (1 or 0) says whether it was, and a
-- refusal writes nothing and fails nothing else of the batch. A run another claimant has
-- locked right now is not waited for. Typed parameters: it is prepared.
WITH taken AS (
    UPDATE runs
    SET lease_owner = CAST(:owner AS text),
        lease_expires_at = CAST(:lease_until AS double precision), status = 'running',
        updated_at = CAST(:now AS double precision), recoveries = 0, recovery_mark = NULL,
        wake_at = NULL, waiting_for = NULL
    WHERE workflow_id = (SELECT workflow_id FROM runs
                         WHERE workflow_id = CAST(:workflow_id AS text)
                         FOR UPDATE SKIP LOCKED)
      AND lease_owner IS NOT DISTINCT FROM CAST(:expected_owner AS text)
      AND {{claimable}}
    RETURNING workflow_id
)
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
SELECT taken.workflow_id, CAST(:seq AS integer), CAST(:position AS text),
       CAST(:kind AS text), CAST(:name AS text), CAST(:status AS text),
       CAST(:attempt AS integer), CAST(:started_at AS double precision),
       CAST(:finished_at AS double precision), CAST(:input AS bytea), CAST(:output AS bytea),
       CAST(:error AS text), CAST(:by AS text), CAST(:compensable AS integer),
       CAST(:call_id AS text), CAST(:usage AS text)
FROM taken;

-- own: recover_in_batch
-- take_lease of a recovery (a takeover of a dead or lapsed holder's run) with its 'resumed'
-- entry as one statement, for a batch sent whole, as claim_in_batch is for a start: it counts
-- the recovery in a row as recovery_state and take_lease do (one more unless the run completed
-- journal entries since the last recovery's mark, else 1), swaps the lease and journals the
-- entry, all hanging on the fenced UPDATE. It returns the new count, or no row when refused
-- (changing nothing and failing nothing else of the batch). It is sent after
-- lock_run_skip_locked in the same transaction, so that its snapshot, which counts the
-- progress, is taken once the run is locked (as the plain way's second statement's is); a run
-- another claimant has locked is not waited for. Typed parameters: it is prepared.
WITH locked AS (
    SELECT workflow_id, recoveries, recovery_mark FROM runs
    WHERE workflow_id = CAST(:workflow_id AS text) FOR UPDATE SKIP LOCKED
), progress AS (
    SELECT count(*) AS done FROM journal
    WHERE workflow_id = CAST(:workflow_id AS text) AND seq IS NOT NULL
      AND status = 'completed'
), taken AS (
    UPDATE runs
    SET lease_owner = CAST(:owner AS text),
        lease_expires_at = CAST(:lease_until AS double precision), status = 'running',
        updated_at = CAST(:now AS double precision),
        recoveries = CASE WHEN locked.recovery_mark IS NOT NULL
                               AND progress.done <= locked.recovery_mark
                          THEN locked.recoveries + 1 ELSE 1 END,
        recovery_mark = progress.done, wake_at = NULL, waiting_for = NULL
    FROM locked, progress
    WHERE runs.workflow_id = locked.workflow_id
      AND lease_owner IS NOT DISTINCT FROM CAST(:expected_owner AS text)
      AND {{claimable}}
    RETURNING runs.workflow_id, runs.recoveries
), journaled AS (
    INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                         finished_at, input, output, error, by, compensable, call_id, usage)
    SELECT taken.workflow_id, CAST(:seq AS integer), CAST(:position AS text),
           CAST(:kind AS text), CAST(:name AS text), CAST(:status AS text),
           CAST(:attempt AS integer), CAST(:started_at AS double precision),
           CAST(:finished_at AS double precision), CAST(:input AS bytea),
           CAST(:output AS bytea), CAST(:error AS text), CAST(:by AS text),
           CAST(:compensable AS integer), CAST(:call_id AS text), CAST(:usage AS text)
    FROM taken
)
SELECT recoveries FROM taken;

-- own: charge_in_batch
-- An attempt finish_in_batch journals before the run's end (a sync workflow's last steps),
-- sent before it: written only where finish_in_batch's own precondition holds, which the
-- row lock taken here keeps until the end of the transaction.
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
SELECT CAST(:workflow_id AS text), CAST(:seq AS integer), CAST(:position AS text),
       CAST(:kind AS text), CAST(:name AS text), CAST(:status AS text),
       CAST(:attempt AS integer), CAST(:started_at AS double precision),
       CAST(:finished_at AS double precision), CAST(:input AS bytea), CAST(:output AS bytea),
       CAST(:error AS text), CAST(:by AS text), CAST(:compensable AS integer),
       CAST(:call_id AS text), CAST(:usage AS text)
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = CAST(:workflow_id AS text)
                AND lease_owner = CAST(:owner AS text) AND status = 'running' FOR SHARE);

-- own: finish_in_batch
-- finish_run with the rest of its transaction (its end's entry, closing its approvals,
-- waking a parent that waits on it) as one statement, for a batch sent whole: everything
-- hangs on the fenced UPDATE, so a lost lease writes nothing and the row count (1 or 0)
-- says which. The run's own values are run_*: the entry's have the plain names.
WITH finished AS (
    UPDATE runs
    SET status = CAST(:run_status AS text), output = CAST(:run_output AS bytea),
        error = CAST(:run_error AS text), updated_at = CAST(:now AS double precision),
        lease_owner = NULL, lease_expires_at = NULL, current_step = NULL
    WHERE workflow_id = CAST(:workflow_id AS text) AND lease_owner = CAST(:owner AS text)
      AND status = 'running'
    RETURNING workflow_id, parent_id
), closed AS (
    UPDATE approvals SET decided_at = CAST(:now AS double precision),
                         reason = CAST(:reason AS text)
    WHERE workflow_id = (SELECT workflow_id FROM finished) AND decided_at IS NULL
), woken AS (
    UPDATE runs SET wake_at = CAST(:now AS double precision),
                    updated_at = CAST(:now AS double precision)
    WHERE workflow_id = (SELECT parent_id FROM finished)
      AND status = 'suspended' AND waiting_for = CAST(:waiting_for AS text)
)
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
SELECT finished.workflow_id, CAST(:seq AS integer), CAST(:position AS text),
       CAST(:kind AS text), CAST(:name AS text), CAST(:status AS text),
       CAST(:attempt AS integer), CAST(:started_at AS double precision),
       CAST(:finished_at AS double precision), CAST(:input AS bytea), CAST(:output AS bytea),
       CAST(:error AS text), CAST(:by AS text), CAST(:compensable AS integer),
       CAST(:call_id AS text), CAST(:usage AS text)
FROM finished;

-- name: take_lease
UPDATE runs
SET lease_owner = :owner, lease_expires_at = :lease_until, status = 'running',
    updated_at = :now, recoveries = :recoveries, recovery_mark = :recovery_mark,
    wake_at = NULL, waiting_for = NULL
WHERE workflow_id = :workflow_id AND lease_owner IS NOT DISTINCT FROM :expected_owner AND {{claimable}};

-- name: append_entry_if_owner
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
SELECT :workflow_id, :seq, :position, :kind, :name, :status, :attempt, :started_at,
       :finished_at, :input, :output, :error, :by, :compensable, :call_id, :usage
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = :workflow_id AND lease_owner = :owner
              FOR SHARE);

-- name: get_payloads
SELECT digest, data FROM payloads WHERE digest = ANY(:digests);

-- own: no_jit
-- For the rest of the transaction (payloads_below's).
SET LOCAL jit = off;

-- own: payloads_below
-- The rows of :digests and every row below those not in :leaves, in one round trip, not
-- one per level of the trees: garbage.children_of read in SQL, by the row's first byte,
-- where its keys start and how wide they are. A tree node lists its children (V, and T of
-- earlier releases: every key after the level byte; U and Q, a rest node: count + has-up
-- keys after 4 bytes), a manifest (M) its chunks, a piece deflated against a row (D) that
-- row, which is read but not walked (a dictionary, whatever it holds). A node has at most
-- 32 children, so a row's first 32 keys are followed (a flat manifest of more leaves its
-- rest to the caller's next read), and a constant series keeps the plan's estimates small.
-- Each key is a primary-key lookup (LIMIT 1 keeps the subquery from becoming a join that
-- scans payloads). A key past a row's end, or a row that only looks like a node, finds
-- nothing or a row the caller never asks for.
WITH RECURSIVE walk(digest, data, walked) AS (
    SELECT digest, data, digest <> ALL(:leaves) FROM payloads WHERE digest = ANY(:digests)
  UNION
    SELECT below.digest, below.data, shape.tag <> '\x44'::bytea
    FROM walk
    JOIN (VALUES ('\x56'::bytea, 2, 20), ('\x54'::bytea, 2, 32), ('\x55'::bytea, 4, 20),
                 ('\x51'::bytea, 4, 32), ('\x4d'::bytea, 1, 32), ('\x44'::bytea, 1, 32))
        AS shape(tag, skip, width) ON shape.tag = substr(walk.data, 1, 1)
    CROSS JOIN generate_series(0, 31) AS child(n)
    CROSS JOIN LATERAL (
        SELECT digest, data FROM payloads
        WHERE digest = substr(walk.data, shape.skip + 1 + shape.width * child.n, shape.width)
        LIMIT 1
    ) AS below
    WHERE walk.walked AND child.n < CASE
        WHEN shape.tag IN ('\x55'::bytea, '\x51'::bytea) THEN
            CASE WHEN length(walk.data) >= 4
                 THEN get_byte(walk.data, 2) + get_byte(walk.data, 3) ELSE 0 END
        WHEN shape.tag = '\x44'::bytea THEN 1
        ELSE (length(walk.data) - shape.skip) / shape.width END
)
SELECT digest, data FROM walk;

-- name: approvals_of_runs
SELECT workflow_id, approval_id, subject, details, requested_at, expires_at, decided_at,
       approved, by, reason
FROM approvals WHERE workflow_id = ANY(:ids);

-- name: claim_candidates
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, trace_context, parent_id
FROM runs
WHERE name = ANY(:names)
  AND queue = ANY(:queues)
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
  AND name = ANY(:names);

-- name: next_wake
SELECT min(wake_at) FROM runs WHERE status = 'suspended' AND wake_at IS NOT NULL
  AND name = ANY(:names)
  AND queue = ANY(:queues);

-- own: lock_run
SELECT 1 FROM runs WHERE workflow_id = :workflow_id FOR UPDATE;

-- own: lock_run_skip_locked
SELECT 1 FROM runs WHERE workflow_id = :workflow_id FOR UPDATE SKIP LOCKED;

-- own: lock_queue
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/queue/' || :queue));

-- own: run_exists
SELECT 1 FROM runs WHERE workflow_id = :workflow_id;

-- own: server_time
SELECT EXTRACT(EPOCH FROM clock_timestamp());

-- own: append_step_prepared
-- The hot path, prepared once per connection: typed parameters, so no literal is rendered.
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
SELECT CAST(:workflow_id AS text), CAST(:seq AS integer), CAST(:position AS text),
       CAST(:kind AS text), CAST(:name AS text), CAST(:status AS text),
       CAST(:attempt AS integer), CAST(:started_at AS double precision),
       CAST(:finished_at AS double precision), CAST(:input AS bytea), CAST(:output AS bytea),
       CAST(:error AS text), CAST(:by AS text), CAST(:compensable AS integer),
       CAST(:call_id AS text), CAST(:usage AS text)
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = CAST(:workflow_id AS text)
                AND lease_owner = CAST(:owner AS text) FOR SHARE);

-- name: lock_breaker
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/breaker/' || :name));

-- name: create_child_run
-- A child run, started by its parent (whose lease the caller checked in the same transaction).
INSERT INTO runs (workflow_id, name, status, queue, priority, input, created_at, updated_at,
                  deadline, trace_context, parent_id, detached)
VALUES (:workflow_id, :name, 'pending', :queue, 0, :input, round(CAST(:now AS numeric), 6), :now,
        :deadline, :trace_context, :parent_id, :detached)
ON CONFLICT (workflow_id) DO NOTHING;

-- name: lock_shared
-- Serialize the writers of one key, so a writer reads the version the last one committed.
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/shared/' || :key));

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
                     ELSE GREATEST(schedules.last_tick, excluded.declared_at) END,
    next_due = excluded.declared_at, revision = schedules.revision + 1,
    declared_at = excluded.declared_at;

-- name: next_schedule_due
SELECT next_due FROM schedules WHERE workflow = ANY(:names) ORDER BY next_due LIMIT 1;

-- name: due_schedules
SELECT name, workflow, cron, timezone, catch_up, input, last_tick, next_due, revision,
       declared_at
FROM schedules WHERE next_due <= :now AND workflow = ANY(:names)
ORDER BY next_due, name;

-- name: chunk_held
-- Locked against a collector's delete until this transaction, which records its use, ends.
SELECT 1 FROM snapshot_chunks WHERE digest = :digest FOR KEY SHARE;

-- name: append_chunk
INSERT INTO stream_chunks (workflow_id, stream, "offset", seq, attempt, origin, data, at)
SELECT :workflow_id, :stream, COALESCE(MAX(c."offset"), -1) + 1, CAST(:seq AS BIGINT),
       CAST(:attempt AS INTEGER), CAST(:origin AS TEXT), CAST(:data AS BYTEA),
       CAST(:at AS DOUBLE PRECISION)
FROM stream_chunks c WHERE c.workflow_id = :workflow_id AND c.stream = :stream
ON CONFLICT (workflow_id, origin) DO NOTHING;

-- own: append_chunks
-- A run's chunks in one statement (append_chunk, one row each, costs a round of the pipeline
-- per row): those whose origin is not there yet, numbered per stream in the order given after
-- the stream's last offset (the run's row is locked, so no other writer takes offsets now).
WITH given AS (
    SELECT g.stream, g.seq, g.attempt, g.origin, g.data, g.at, g.n
    FROM unnest(CAST(:streams AS TEXT[]), CAST(:seqs AS BIGINT[]), CAST(:attempts AS INTEGER[]),
                CAST(:origins AS TEXT[]), CAST(:datas AS BYTEA[]),
                CAST(:ats AS DOUBLE PRECISION[]))
         WITH ORDINALITY AS g(stream, seq, attempt, origin, data, at, n)
    WHERE NOT EXISTS (
        SELECT 1 FROM stream_chunks c WHERE c.workflow_id = :workflow_id AND c.origin = g.origin)
), numbered AS (
    SELECT given.*, row_number() OVER (PARTITION BY given.stream ORDER BY given.n) AS k
    FROM given
)
INSERT INTO stream_chunks (workflow_id, stream, "offset", seq, attempt, origin, data, at)
SELECT :workflow_id, numbered.stream,
       COALESCE((SELECT MAX(c."offset") FROM stream_chunks c
                 WHERE c.workflow_id = :workflow_id AND c.stream = numbered.stream), -1)
       + numbered.k,
       numbered.seq, numbered.attempt, numbered.origin, numbered.data, numbered.at
FROM numbered ORDER BY numbered.n
ON CONFLICT (workflow_id, origin) DO NOTHING;

-- name: prunable_runs
SELECT r.workflow_id FROM runs r
WHERE r.status IN ('completed', 'failed', 'cancelled') AND r.updated_at < :before
  AND (:status IS NULL OR r.status = :status) AND (:name IS NULL OR r.name = :name)
  AND r.name <> ALL(:exclude)
  AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.workflow_id
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
  AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.workflow_id = r.parent_id
                  AND p.status NOT IN ('completed', 'cancelled'))
ORDER BY r.updated_at LIMIT :limit;

-- name: count_prunable
SELECT count(*) FROM runs r
WHERE r.status IN ('completed', 'failed', 'cancelled') AND r.updated_at < :before
  AND (:status IS NULL OR r.status = :status) AND (:name IS NULL OR r.name = :name)
  AND r.name <> ALL(:exclude)
  AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.workflow_id
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
  AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.workflow_id = r.parent_id
                  AND p.status NOT IN ('completed', 'cancelled'));

-- name: delete_runs
DELETE FROM runs
WHERE workflow_id = ANY(:ids)
  AND status IN ('completed', 'failed', 'cancelled') AND updated_at < :before
  AND (:status IS NULL OR status = :status) AND (:name IS NULL OR name = :name)
  AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = runs.workflow_id
                  AND c.status NOT IN ('completed', 'failed', 'cancelled'))
  AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.workflow_id = runs.parent_id
                  AND p.status NOT IN ('completed', 'cancelled'))
RETURNING workflow_id;

-- name: delete_journal
DELETE FROM journal WHERE workflow_id = ANY(:ids);

-- name: delete_events
DELETE FROM events WHERE workflow_id = ANY(:ids);

-- name: delete_approvals
DELETE FROM approvals WHERE workflow_id = ANY(:ids);

-- name: delete_run_spend
DELETE FROM run_spend WHERE workflow_id = ANY(:ids);

-- name: delete_run_calls
DELETE FROM run_calls WHERE workflow_id = ANY(:ids);

-- name: delete_run_spend_steps
DELETE FROM run_spend_steps WHERE workflow_id = ANY(:ids);

-- name: delete_snapshot_uses
DELETE FROM snapshot_uses
WHERE snapshot_id IN (SELECT id FROM snapshots WHERE workflow_id = ANY(:ids));

-- name: delete_snapshot_files
DELETE FROM snapshot_files
WHERE snapshot_id IN (SELECT id FROM snapshots WHERE workflow_id = ANY(:ids));

-- name: delete_snapshots
DELETE FROM snapshots WHERE workflow_id = ANY(:ids);

-- name: delete_stream_chunks
DELETE FROM stream_chunks WHERE workflow_id = ANY(:ids);

-- name: payload_graph
SELECT digest, touched_at,
       CASE WHEN substr(data, 1, 1) IN ('\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea) THEN data ELSE substr(data, 1, 33) END AS head,
       refs
FROM payloads;

-- name: payload_references
SELECT input AS ref FROM runs WHERE substr(input, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT output AS ref FROM runs WHERE substr(output, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT progress AS ref FROM runs WHERE substr(progress, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT input AS ref FROM journal WHERE substr(input, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT output AS ref FROM journal WHERE substr(output, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT payload AS ref FROM events WHERE substr(payload, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT details AS ref FROM approvals WHERE substr(details, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT value AS ref FROM shared_writes WHERE substr(value, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT input AS ref FROM schedules WHERE substr(input, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea)
UNION ALL SELECT input AS ref FROM run_calls WHERE substr(input, 1, 1) IN ('\x48'::bytea, '\x4d'::bytea, '\x51'::bytea, '\x54'::bytea, '\x55'::bytea, '\x56'::bytea);

-- name: payload_touched
SELECT touched_at FROM payloads WHERE digest = :digest FOR UPDATE;

-- own: payloads_touched
-- payload_touched for a whole batch in one round trip (the rows locked FOR UPDATE alike).
SELECT digest, touched_at FROM payloads WHERE digest = ANY(:digests) ORDER BY digest FOR UPDATE;

-- own: delete_payloads
DELETE FROM payloads WHERE digest = ANY(:digests);

-- name: unused_chunks
SELECT digest FROM snapshot_chunks c
WHERE created_at < :before
  AND NOT EXISTS (SELECT 1 FROM snapshot_uses u WHERE u.digest = c.digest)
LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: stats_started
SELECT CAST(floor((created_at - :since) / :width) AS INTEGER) AS bucket, count(*) AS runs
FROM runs WHERE created_at >= :since
GROUP BY bucket ORDER BY bucket;

-- name: stats_finished
SELECT CAST(floor((updated_at - :since) / :width) AS INTEGER) AS bucket, status,
       count(*) AS runs
FROM runs WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= :since
GROUP BY bucket, status ORDER BY bucket, status;

-- name: stats_workflows
SELECT runs.name, count(*) AS runs,
       coalesce(sum(run_spend.input_tokens), 0) AS input_tokens,
       coalesce(sum(run_spend.output_tokens), 0) AS output_tokens,
       coalesce(sum(run_spend.cost), 0) AS cost
FROM runs LEFT JOIN run_spend ON run_spend.workflow_id = runs.workflow_id
WHERE runs.created_at >= :since
GROUP BY runs.name
ORDER BY runs.name;
