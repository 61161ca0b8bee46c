-- The named queries of every SQL dialect (loaded by stalwart._store.queries).
--
-- `-- name: x` is a query, the same on every dialect. `-- fragment: x` is a condition several
-- queries share, written into each `{{x}}`. `-- dialect: x` is a query each dialect writes in
-- its own sql/<dialect>/queries.sql (the comment under it says why it differs); a dialect
-- that does not write it fails to load, as does one that writes a name not declared here.

-- name: schema_table
CREATE TABLE IF NOT EXISTS stalwart_schema (
    version           INTEGER NOT NULL,
    oldest_compatible INTEGER NOT NULL
);

-- name: schema_version
SELECT version, oldest_compatible FROM stalwart_schema ORDER BY version DESC LIMIT 1;

-- name: set_schema_version
INSERT INTO stalwart_schema (version, oldest_compatible) VALUES (:version, :oldest_compatible);

-- name: raise_oldest_compatible
-- On the latest row only, and only upwards: the oldest code a store serves never goes down.
UPDATE stalwart_schema SET oldest_compatible = :oldest_compatible
WHERE version = (SELECT max(version) FROM stalwart_schema)
  AND oldest_compatible < :oldest_compatible;

-- dialect: create_run
-- round() to the microsecond: of a REAL on SQLite, of a numeric on PostgreSQL.

-- fragment: claimable
-- The one definition of a run a worker may take now: pending or running with no live lease
-- (none, no expiry, lapsed, or its holder seen gone by the caller: :holder_gone), or suspended
-- and due. take_lease, claim_candidates and claimable all use it.
((status = 'suspended' AND wake_at <= :now)
 OR (status IN ('pending', 'running')
     AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= :now
          OR :holder_gone = 1)))

-- name: claimable
SELECT 1 FROM runs WHERE workflow_id = :workflow_id AND {{claimable}};

-- name: get_run
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, trace_context, parent_id
FROM runs WHERE workflow_id = :workflow_id;

-- dialect: take_lease
-- A NULL-safe comparison: IS on SQLite, IS NOT DISTINCT FROM on PostgreSQL.

-- name: recovery_state
SELECT recoveries, recovery_mark,
       (SELECT count(*) FROM journal
        WHERE journal.workflow_id = runs.workflow_id AND seq IS NOT NULL
          AND status = 'completed') AS progress
FROM runs WHERE workflow_id = :workflow_id;

-- name: renew_lease
UPDATE runs SET lease_expires_at = :lease_until
WHERE workflow_id = :workflow_id AND lease_owner = :owner
RETURNING cancel_requested;

-- name: record_progress
UPDATE runs SET lease_expires_at = :lease_until, progress = :progress, updated_at = :now
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: finish_run
UPDATE runs
SET status = :status, output = :output, error = :error, updated_at = :now,
    lease_owner = NULL, lease_expires_at = NULL, current_step = NULL
WHERE workflow_id = :workflow_id AND lease_owner = :owner AND status = 'running';

-- dialect: append_entry_if_owner
-- PostgreSQL locks the run row FOR SHARE (SQLite's writers are serial).

-- name: append_entry
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable, call_id, usage)
VALUES (:workflow_id, :seq, :position, :kind, :name, :status, :attempt, :started_at,
        :finished_at, :input, :output, :error, :by, :compensable, :call_id, :usage);

-- name: put_payload
-- A row found stored is refreshed when it was last touched before :stale (and on PostgreSQL
-- locked either way, by ON CONFLICT DO UPDATE, until this transaction ends): the collector's
-- grace window then covers every transaction that may still reference it (docs/lifecycle.md).
-- Changes one row when it stored or refreshed the row: its children are then put in turn.
-- refs (a sealed row's references in clear) is written with the row, never changed after.
INSERT INTO payloads (digest, data, touched_at, refs) VALUES (:digest, :data, :now, :refs)
ON CONFLICT (digest) DO UPDATE SET touched_at = excluded.touched_at
WHERE payloads.touched_at IS NULL OR payloads.touched_at < :stale;

-- name: last_step_result
-- The result column of the run's last completed step (what its next step's input repeats).
SELECT output FROM journal
WHERE workflow_id = :workflow_id AND kind = 'step' AND status = 'completed'
ORDER BY id DESC LIMIT 1;

-- name: get_payload
SELECT data FROM payloads WHERE digest = :digest;

-- dialect: get_payloads
-- Many stored pieces in one read (a journal's payloads): = ANY(:digests) on PostgreSQL; on
-- SQLite one `?` per digest in place of :digests, as a list of blobs has no JSON form for
-- json_each.

-- name: replay_index
SELECT seq, position, kind, name, status, attempt, output, error,
       CASE WHEN status = 'scheduled' THEN input END AS input
FROM journal
WHERE workflow_id = :workflow_id AND seq IS NOT NULL AND kind != 'compensation'
ORDER BY id;

-- name: replay_state
-- replay_index and rollback_state in one read, for a run about to be executed: the positioned
-- rows, then (seq NULL) the run's last rolling_back or retry marker, if any.
SELECT seq, position, kind, name, status, attempt, output, error,
       CASE WHEN status = 'scheduled' THEN input END AS input
FROM journal
WHERE workflow_id = :workflow_id
  AND ((seq IS NOT NULL AND kind != 'compensation')
       OR id = (SELECT id FROM journal
                WHERE workflow_id = :workflow_id AND seq IS NULL
                  AND ((kind = 'run' AND name = 'rolling_back')
                       OR (kind = 'operator' AND name = 'retry'))
                ORDER BY id DESC LIMIT 1))
ORDER BY id;

-- name: journal
SELECT id, seq, kind, name, status, attempt, started_at, finished_at, input, output, error, by,
       position, usage
FROM journal WHERE workflow_id = :workflow_id ORDER BY id;

-- name: journal_after
-- The rows after the one with id `after` (the console's run page polls with it): a range of
-- the index journal_by_run (workflow_id, id; on SQLite (workflow_id), whose entries end in
-- the rowid, id), however long the journal is.
SELECT id, seq, kind, name, status, attempt, started_at, finished_at, input, output, error, by,
       position, usage
FROM journal WHERE workflow_id = :workflow_id AND id > :after ORDER BY id;

-- name: journal_page
-- At most `limit` rows after the one with id `after` (app.journal(after=, limit=)): the same
-- range of journal_by_run, stopped after `limit` rows.
SELECT id, seq, kind, name, status, attempt, started_at, finished_at, input, output, error, by,
       position, usage
FROM journal WHERE workflow_id = :workflow_id AND id > :after ORDER BY id LIMIT :limit;

-- name: journal_size
SELECT count(*) FROM journal WHERE workflow_id = :workflow_id;

-- fragment: run_filter
-- What list_runs and count_runs filter on (each filter NULL: not applied, and dropped from the
-- query text as run, so the index of each filter given is used: runs_by_status_created...).
(:status IS NULL OR status = :status)
  AND (:name IS NULL OR name = :name)
  AND (:queue IS NULL OR queue = :queue)
  AND (:since IS NULL OR created_at >= :since - 0.0000005)

-- name: list_runs
-- Newest first on (created_at, workflow_id): a page ends at (:before, :before_id), so runs
-- created in the same microsecond page correctly. The bound on created_at alone comes first,
-- so that a deep page starts its index scan there instead of filtering every newer run.
-- The page's keys are read first, from the index of the filter given alone (it ends in
-- created_at and workflow_id: it covers them), then its rows by primary key: PostgreSQL,
-- pricing a heap read for each row of the filter's index, walked the index by creation time
-- instead (runs_by_created then; runs_by_created_name since 0027) and filtered every newer
-- run (all of them, for a filter whose runs are old).
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, parent_id
FROM runs
JOIN (SELECT workflow_id AS page_id, created_at AS page_at FROM runs
      WHERE {{run_filter}}
        AND (:parent_id IS NULL OR parent_id = :parent_id)
        AND (:before IS NULL OR (created_at <= :before + 0.0000005
                                  AND (created_at < :before - 0.0000005
                                       OR (:before_id IS NOT NULL AND workflow_id < :before_id))))
      ORDER BY created_at DESC, workflow_id DESC
      LIMIT :limit) AS page ON workflow_id = page_id
ORDER BY page_at DESC, page_id DESC;

-- name: count_runs
SELECT count(*) FROM runs WHERE {{run_filter}}
  AND (:parent_id IS NULL OR parent_id = :parent_id);

-- name: run_counts
SELECT queue, status, count(*) AS runs FROM runs GROUP BY queue, status;

-- name: queue_counts
-- The queues page's pending and running runs by queue: a range of runs_by_status (status,
-- queue, ...) for each of the two statuses, never the ended runs, which are most of them.
SELECT queue, status, count(*) AS runs FROM runs
WHERE status IN ('pending', 'running')
GROUP BY queue, status;

-- name: run_queues
-- Every queue some run uses, whatever its status: one probe of runs_by_queue_created per
-- queue (a loose index scan), never a read of the runs themselves.
WITH RECURSIVE used(queue) AS (
    SELECT min(queue) FROM runs
    UNION ALL
    SELECT (SELECT min(r.queue) FROM runs r WHERE r.queue > used.queue)
    FROM used WHERE used.queue IS NOT NULL
)
SELECT queue FROM used WHERE queue IS NOT NULL;

-- name: publish_step
UPDATE runs SET current_step = :current
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: declare_queue
INSERT INTO queues (name, concurrency, rate, period, declared_at)
VALUES (:name, :concurrency, :rate, :period, :now)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, rate = excluded.rate,
                                 period = excluded.period, declared_at = excluded.declared_at;

-- name: list_queues
SELECT name, concurrency, rate, period FROM queues ORDER BY name;

-- name: beat_worker
INSERT INTO workers (id, host, pid, queues, started_at, seen_at, running, workflows)
VALUES (:id, :host, :pid, :queues, :started_at, :now, :running, :workflows)
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, running = excluded.running,
                               queues = excluded.queues, workflows = excluded.workflows;

-- name: drop_stale_workers
DELETE FROM workers WHERE seen_at < :before;

-- name: drop_worker
DELETE FROM workers WHERE id = :id;

-- name: list_workers
SELECT id, host, pid, queues, started_at, seen_at, running, workflows FROM workers
ORDER BY started_at, id;

-- dialect: claim_candidates
-- The whole run row (get_run's columns): a worker starts a candidate without reading it again.
-- A list parameter: json_each(:names) on SQLite, = ANY(:names) on PostgreSQL.

-- dialect: held_on_host
-- Each run's whole row, as get_run reads it (a restart takes them over in one read).
-- A list parameter: json_each(:names) on SQLite, = ANY(:names) on PostgreSQL.

-- dialect: next_wake
-- A list parameter: json_each(:names) on SQLite, = ANY(:names) on PostgreSQL.

-- name: suspend_run
UPDATE runs
SET status = 'suspended', wake_at = :wake_at, waiting_for = :waiting_for,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE workflow_id = :workflow_id AND lease_owner = :owner AND status = 'running'
  AND NOT EXISTS (SELECT 1 FROM events
                  WHERE events.workflow_id = :workflow_id AND events.name = :event_name
                    AND events.consumed_seq IS NULL)
  AND NOT EXISTS (SELECT 1 FROM approvals
                  WHERE approvals.workflow_id = :workflow_id
                    AND approvals.approval_id = :approval_id
                    AND approvals.decided_at IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM breakers
                  WHERE breakers.name = :breaker_name AND breakers.state = 'closed')
  AND NOT EXISTS (SELECT 1 FROM runs AS child
                  WHERE child.workflow_id = :child_id
                    AND child.status IN ('completed', 'failed', 'cancelled'))
  AND cancel_requested = 0;

-- name: insert_event
INSERT INTO events (workflow_id, name, payload, dedup_key, sent_at, by)
SELECT :workflow_id, :name, :payload, :dedup_key, :now, :by
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = :workflow_id)
ON CONFLICT DO NOTHING;

-- name: wake_run
UPDATE runs SET wake_at = :now, updated_at = :now
WHERE workflow_id = :workflow_id AND status = 'suspended' AND waiting_for = :waiting_for;

-- name: oldest_event
SELECT id, payload FROM events
WHERE workflow_id = :workflow_id AND name = :name AND consumed_seq IS NULL
  AND (:until IS NULL OR sent_at <= :until)
ORDER BY id LIMIT 1;

-- name: consume_event
UPDATE events SET consumed_seq = :seq WHERE id = :id AND consumed_seq IS NULL;

-- name: seq_completed
SELECT 1 FROM journal
WHERE workflow_id = :workflow_id AND seq = :seq AND status = 'completed' LIMIT 1;

-- name: lease_held
SELECT 1 FROM runs WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: parent_held
SELECT cancel_requested FROM runs WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- name: create_approval
INSERT INTO approvals (workflow_id, approval_id, subject, details, requested_at, expires_at)
VALUES (:workflow_id, :approval_id, :subject, :details, :now, :expires_at)
ON CONFLICT DO NOTHING;

-- name: get_approval
SELECT workflow_id, approval_id, subject, details, requested_at, expires_at, decided_at,
       approved, by, reason
FROM approvals WHERE workflow_id = :workflow_id AND approval_id = :approval_id;

-- name: list_approvals
SELECT workflow_id, approval_id, subject, details, requested_at, expires_at, decided_at,
       approved, by, reason
FROM approvals
WHERE (:pending IS NULL OR decided_at IS NULL)
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id)
ORDER BY requested_at, workflow_id, approval_id;

-- name: count_pending_approvals
-- What the console's navigation shows beside "Approvals", through approvals_pending.
SELECT count(*) FROM approvals WHERE decided_at IS NULL;

-- dialect: approvals_of_runs
-- The approval requests of a page of runs in one read (what each waits on), through the
-- primary key (workflow_id, approval_id). A list parameter: json_each(:ids) on SQLite,
-- = ANY(:ids) on PostgreSQL.

-- name: decide_approval
UPDATE approvals SET decided_at = :now, approved = :approved, by = :by, reason = :reason
WHERE workflow_id = :workflow_id AND approval_id = :approval_id AND decided_at IS NULL;

-- name: cancel_waiting_run
UPDATE runs
SET status = 'cancelled', cancel_requested = 1, lease_owner = NULL, lease_expires_at = NULL,
    wake_at = NULL, waiting_for = NULL, current_step = NULL, updated_at = :now,
    error = :error
WHERE workflow_id = :workflow_id AND status IN ('pending', 'suspended', 'needs_attention')
  AND lease_owner IS NULL
  AND NOT EXISTS (SELECT 1 FROM journal
                  WHERE journal.workflow_id = :workflow_id AND compensable = 1
                    AND status IN ('completed', 'reused'));

-- name: cancel_to_roll_back
UPDATE runs
SET cancel_requested = 1, status = CASE WHEN status = 'needs_attention' THEN 'pending'
                                        ELSE status END,
    wake_at = CASE WHEN status = 'suspended' THEN :now ELSE wake_at END, updated_at = :now
WHERE workflow_id = :workflow_id AND status IN ('pending', 'suspended', 'needs_attention')
  AND lease_owner IS NULL;

-- name: compensation_plan
SELECT id, seq, position, name, status, attempt, input, output, kind, error
FROM journal
WHERE workflow_id = :workflow_id AND seq IS NOT NULL
  AND (kind = 'compensation' OR (kind = 'step' AND (compensable = 1 OR status = 'compensated')))
ORDER BY id;

-- name: request_cancel
UPDATE runs SET cancel_requested = 1, updated_at = :now
WHERE workflow_id = :workflow_id
  AND status IN ('pending', 'running', 'suspended', 'needs_attention');

-- name: cancel_requested_for
SELECT workflow_id FROM runs
WHERE cancel_requested = 1 AND status = 'running'
  AND substr(lease_owner, 1, length(:owner_prefix)) = :owner_prefix;

-- name: close_approvals
UPDATE approvals SET decided_at = :now, reason = :reason
WHERE workflow_id = :workflow_id AND decided_at IS NULL;

-- name: expire_approval
UPDATE approvals SET decided_at = :now, reason = 'expired'
WHERE workflow_id = :workflow_id AND approval_id = :approval_id AND decided_at IS NULL;

-- name: redrive_run
UPDATE runs
SET status = 'pending', error = NULL, recoveries = 0, recovery_mark = NULL,
    cancel_requested = 0, lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL,
    waiting_for = NULL, retrying = NULL, current_step = NULL, updated_at = :now
WHERE workflow_id = :workflow_id AND status IN ('failed', 'needs_attention');

-- name: release_run
UPDATE runs SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL,
    updated_at = :now
WHERE workflow_id = :workflow_id AND lease_owner = :owner AND status = 'running';

-- name: fork_candidates
SELECT id, seq, position, kind, name, status, compensable
FROM journal
WHERE workflow_id = :workflow_id AND seq IS NOT NULL AND kind != 'compensation'
ORDER BY id;

-- name: copy_entry_reused
-- A recorded failure (a child's, or a step's the workflow caught) stays a failure, with its
-- error: the fork's replay raises it again.
INSERT INTO journal (workflow_id, seq, position, kind, name, status, attempt, started_at,
                     finished_at, input, output, error, by, compensable)
SELECT :new_id, seq, position, kind, name,
       CASE WHEN status IN ('scheduled', 'in_doubt') THEN status
            WHEN status = 'failed' THEN status ELSE 'reused' END, attempt,
       started_at, finished_at, input, output,
       CASE WHEN status = 'failed' THEN error END, :by, compensable
FROM journal WHERE id = :id;

-- name: rollback_state
SELECT name, output FROM journal
WHERE workflow_id = :workflow_id AND seq IS NULL
  AND ((kind = 'run' AND name = 'rolling_back') OR (kind = 'operator' AND name = 'retry'))
ORDER BY id DESC LIMIT 1;

-- name: run_state
SELECT status, queue FROM runs WHERE workflow_id = :workflow_id;

-- name: queue_running
SELECT count(*) FROM runs WHERE status = 'running' AND queue = :queue;

-- name: prune_starts
DELETE FROM queue_starts WHERE queue = :queue AND started_at <= :since;

-- name: recent_starts
SELECT count(*) FROM queue_starts WHERE queue = :queue AND started_at > :since;

-- name: record_start
INSERT INTO queue_starts (queue, started_at) VALUES (:queue, :now);

-- name: nth_latest_start
SELECT started_at FROM queue_starts WHERE queue = :queue
ORDER BY started_at DESC LIMIT 1 OFFSET :offset;

-- name: entry_exists
SELECT 1 FROM journal WHERE workflow_id = :workflow_id AND call_id = :call_id LIMIT 1;

-- name: mark_retry
UPDATE runs SET retrying = :marker
WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- fragment: breaker_row
-- A breaker as read: its row and the failed attempts inside its sliding window.
SELECT name, state, window_seconds, opened_at, retry_at, probe_owner, probe_until,
       (SELECT count(*) FROM breaker_failures
        WHERE breaker_failures.name = breakers.name
          AND breaker_failures.at > :now - breakers.window_seconds) AS failures
FROM breakers

-- name: get_breaker
{{breaker_row}} WHERE name = :name;

-- name: list_breakers
{{breaker_row}} ORDER BY name;

-- dialect: lock_breaker
-- A lock: none on SQLite (its writers are serial), an advisory lock on PostgreSQL.

-- name: ensure_breaker
-- A new breaker has been closed since ever (updated_at 0): only a change of state moves it.
INSERT INTO breakers (name, state, window_seconds, updated_at)
VALUES (:name, 'closed', :window, 0)
ON CONFLICT (name) DO UPDATE SET window_seconds = excluded.window_seconds;

-- name: breaker_closed_since
-- The breaker closed (its probe succeeded) after the attempt that failed began.
SELECT 1 FROM breakers WHERE name = :name AND state = 'closed' AND updated_at > :started;

-- name: record_breaker_failure
INSERT INTO breaker_failures (name, at) VALUES (:name, :now);

-- name: prune_breaker_failures
DELETE FROM breaker_failures WHERE name = :name AND at <= :now - :window;

-- name: count_breaker_failures
SELECT count(*) FROM breaker_failures WHERE name = :name AND at > :now - :window;

-- name: open_breaker
-- Closed and tripped (:trip), or half-open with this probe failing or a probe past its time.
UPDATE breakers
SET state = 'open', opened_at = :now, retry_at = :retry_at, probe_owner = NULL,
    probe_until = NULL, updated_at = :now
WHERE name = :name
  AND ((state = 'closed' AND :trip = 1)
       OR (state = 'half_open' AND (probe_owner = :probe OR probe_until <= :now)));

-- name: probe_deadline
-- When the half-open breaker's probe counts as failed if it has not finished.
SELECT probe_until FROM breakers WHERE name = :name AND state = 'half_open';

-- name: take_probe
UPDATE breakers SET state = 'half_open', probe_owner = :probe, probe_until = :until,
                    updated_at = :now
WHERE name = :name AND state = 'open' AND retry_at <= :now;

-- name: close_breaker
UPDATE breakers
SET state = 'closed', opened_at = NULL, retry_at = NULL, probe_owner = NULL,
    probe_until = NULL, updated_at = :now
WHERE name = :name AND state = 'half_open' AND probe_owner = :probe;

-- name: clear_breaker_failures
DELETE FROM breaker_failures WHERE name = :name;

-- name: wake_breaker_waiters
UPDATE runs SET wake_at = :now, updated_at = :now
WHERE status = 'suspended' AND waiting_for = :waiting_for;

-- name: retime_breaker_waiters
-- The breaker opened again: runs waiting for its probe wait for the next cooldown instead.
UPDATE runs SET wake_at = :retry_at, updated_at = :now
WHERE status = 'suspended' AND waiting_for = :waiting_for AND wake_at > :retry_at;

-- name: step_usage
-- What a run's step attempts (and its compensations', attempts alike) used, without reading
-- their payloads (describe's usage totals); in-doubt entries too, and the errors, which say
-- which attempts were interrupted. Attempt 0 is no attempt: it is the marker a retry writes to
-- give a step fresh attempts.
SELECT seq, name, status, usage, error FROM journal
WHERE workflow_id = :workflow_id AND kind IN ('step', 'compensation')
  AND status IN ('completed', 'failed', 'in_doubt') AND attempt <> 0
ORDER BY id;

-- name: event_delivered
-- Whether a run already got an event with this dedup key.
SELECT 1 FROM events WHERE workflow_id = :workflow_id AND dedup_key = :dedup_key;

-- dialect: create_child_run
-- round() to the microsecond: of a REAL on SQLite, of a numeric on PostgreSQL.

-- name: child_owner
SELECT name, parent_id FROM runs WHERE workflow_id = :workflow_id;

-- name: wake_parent
-- A child ended: its parent, if it waits on this child, becomes due now.
UPDATE runs SET wake_at = :now, updated_at = :now
WHERE workflow_id = (SELECT parent_id FROM runs WHERE workflow_id = :workflow_id)
  AND status = 'suspended' AND waiting_for = :waiting_for;

-- name: child_runs
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, parent_id
FROM runs WHERE parent_id = :parent_id
ORDER BY created_at, workflow_id;

-- name: attached_children
-- The children a parent's cancel and retry reach: every child but the detached ones.
SELECT workflow_id, name, status, queue, priority, input, output, error, created_at,
       updated_at, lease_owner, lease_expires_at, wake_at, waiting_for, deadline,
       cancel_requested, retrying, progress, current_step, parent_id
FROM runs WHERE parent_id = :parent_id AND detached = 0
ORDER BY created_at, workflow_id;

-- name: redrive_child
-- A parent's retry retries its failed and cancelled children too.
UPDATE runs
SET status = 'pending', error = NULL, recoveries = 0, recovery_mark = NULL,
    cancel_requested = 0, lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL,
    waiting_for = NULL, retrying = NULL, current_step = NULL, updated_at = :now
WHERE workflow_id = :workflow_id AND parent_id = :parent_id
  AND status IN ('failed', 'cancelled', 'needs_attention');

-- name: read_shared
-- A shared key's latest write (its value), read from the end of its primary key.
SELECT key, version, value, by, at FROM shared_writes
WHERE key = :key ORDER BY version DESC LIMIT 1;

-- name: shared_history
SELECT key, version, value, by, at FROM shared_writes WHERE key = :key ORDER BY version;

-- dialect: lock_shared
-- A lock: none on SQLite (its writers are serial), an advisory lock on PostgreSQL.

-- name: shared_version
SELECT COALESCE(MAX(version), 0) FROM shared_writes WHERE key = :key;

-- name: insert_shared
-- Compare-and-set: the next version, only while the key's version is still :expected.
INSERT INTO shared_writes (key, version, value, by, at, call_id)
SELECT :key, :expected + 1, :value, :by, :now, :call_id
WHERE (SELECT COALESCE(MAX(version), 0) FROM shared_writes WHERE key = :key) = :expected;

-- name: shared_write_of_call
-- The version a write with this call id made (a retry after a lost acknowledgement).
SELECT version FROM shared_writes WHERE key = :key AND call_id = :call_id;

-- dialect: declare_schedule
-- The larger of two values: MAX on SQLite, GREATEST on PostgreSQL.

-- name: list_schedules
SELECT name, workflow, cron, timezone, catch_up, input, last_tick, next_due, revision,
       declared_at
FROM schedules ORDER BY name;

-- name: drop_schedule
DELETE FROM schedules WHERE name = :name;

-- dialect: next_schedule_due
-- A list parameter: json_each(:names) on SQLite, = ANY(:names) on PostgreSQL.

-- dialect: due_schedules
-- A list parameter: json_each(:names) on SQLite, = ANY(:names) on PostgreSQL.

-- name: advance_schedule
-- Handle a tick: only from the last tick and the declaration the caller read, so of workers
-- racing for one tick exactly one moves it (and creates the tick's run in the same
-- transaction).
UPDATE schedules SET last_tick = :tick, next_due = :next_due
WHERE name = :name AND last_tick = :last_tick AND revision = :revision;

-- name: live_run_names
-- The workflow names of the runs that have not ended, by queue (a worker warns at start about
-- the names its app does not register: runs nothing will execute). The statuses are listed so
-- that runs_by_status reads the live runs only, never the history of ended ones.
SELECT queue, name, count(*) AS runs FROM runs
WHERE status IN ('pending', 'running', 'suspended', 'needs_attention')
GROUP BY queue, name;

-- name: run_spend
-- A run's running totals (kept by the journal_spend trigger), whether a crash lost some of
-- them (a step with an interrupted attempt that records usage), and the input of the last
-- operator retry that may give it a budget.
SELECT s.input_tokens, s.output_tokens, s.cost, s.attempts,
       EXISTS (SELECT 1 FROM run_spend_steps t
               WHERE t.workflow_id = s.workflow_id AND t.interrupted = 1 AND t.recording = 1)
           AS partial,
       (SELECT j.input FROM journal j WHERE j.id = s.budget_entry) AS budget_input,
       s.since_start, s.counts_calls
FROM run_spend s WHERE s.workflow_id = :workflow_id;

-- name: run_calls
-- How many calls of a step with these arguments (its stored input) the run has recorded.
SELECT count(*) FROM run_calls
WHERE workflow_id = :workflow_id AND name = :name AND input = :input;

-- name: count_calls
-- From now on, the journal_spend triggers count the run's calls.
INSERT INTO run_spend (workflow_id, counts_calls) VALUES (:workflow_id, 1)
ON CONFLICT (workflow_id) DO UPDATE SET counts_calls = 1;

-- name: copy_calls
-- The calls the run recorded before its calls were counted.
INSERT INTO run_calls (workflow_id, name, input, position)
SELECT workflow_id, name, input, position FROM journal
WHERE workflow_id = :workflow_id AND kind = 'step' AND attempt <> 0
  AND status IN ('completed', 'failed') AND input IS NOT NULL AND position IS NOT NULL
ON CONFLICT DO NOTHING;

-- name: begin_snapshot
-- An incomplete snapshot of an existing run (nobody sees it until finish_snapshot), numbered
-- after the run's others (its writers are serialized by the run's lock).
INSERT INTO snapshots (id, workflow_id, number, name, created_at)
SELECT :id, :workflow_id,
       (SELECT coalesce(max(number), 0) + 1 FROM snapshots WHERE workflow_id = :workflow_id),
       :name, :now
WHERE EXISTS (SELECT 1 FROM runs WHERE workflow_id = :workflow_id);

-- dialect: chunk_held
-- Whether a chunk is stored, kept so until the transaction ends: on PostgreSQL its row is
-- locked (FOR KEY SHARE) against a concurrent delete; SQLite's writers are serial.

-- name: put_chunk
INSERT INTO snapshot_chunks (digest, data, size, created_at)
VALUES (:digest, :data, :size, :now)
ON CONFLICT (digest) DO NOTHING;

-- name: use_chunk
INSERT INTO snapshot_uses (snapshot_id, digest) VALUES (:snapshot_id, :digest)
ON CONFLICT DO NOTHING;

-- name: put_snapshot_file
INSERT INTO snapshot_files (snapshot_id, path, kind, mode, size, mtime_ns, target, chunks)
VALUES (:snapshot_id, :path, :kind, :mode, :size, :mtime_ns, :target, :chunks)
ON CONFLICT DO NOTHING;

-- name: finish_snapshot
UPDATE snapshots SET files = :files, bytes = :bytes, stored_bytes = :stored_bytes, complete = 1
WHERE id = :id AND complete = 0;

-- name: get_snapshot
SELECT id, workflow_id, name, files, bytes, stored_bytes, created_at, complete
FROM snapshots WHERE id = :id;

-- name: run_snapshots
SELECT id, workflow_id, name, files, bytes, stored_bytes, created_at, complete
FROM snapshots WHERE workflow_id = :workflow_id AND complete = 1
ORDER BY number;

-- name: last_snapshot
SELECT id, workflow_id, name, files, bytes, stored_bytes, created_at, complete
FROM snapshots WHERE workflow_id = :workflow_id AND name = :name AND complete = 1
ORDER BY number DESC LIMIT 1;

-- name: snapshot_files
-- A page of a snapshot's tree in bytewise path order (PostgreSQL's column is COLLATE "C").
SELECT path, kind, mode, size, mtime_ns, target, chunks FROM snapshot_files
WHERE snapshot_id = :snapshot_id AND path > :after
ORDER BY path LIMIT :limit;

-- name: snapshot_chunk
SELECT data FROM snapshot_chunks WHERE digest = :digest;

-- name: drop_snapshot_uses
DELETE FROM snapshot_uses
WHERE snapshot_id IN (SELECT id FROM snapshots WHERE workflow_id = :workflow_id);

-- name: drop_snapshot_files
DELETE FROM snapshot_files
WHERE snapshot_id IN (SELECT id FROM snapshots WHERE workflow_id = :workflow_id);

-- name: drop_snapshots
DELETE FROM snapshots WHERE workflow_id = :workflow_id;

-- name: chunk_fence
-- Whether the caller still holds the run's lease (its chunks are written only then).
SELECT 1 FROM runs WHERE workflow_id = :workflow_id AND lease_owner = :owner;

-- dialect: append_chunk
-- One chunk at the stream's next offset; a chunk whose origin is there already (a batch
-- retried, workflow code replayed) writes nothing. Writers of one run are serialized (SQLite:
-- one writer; PostgreSQL: the run's row lock, taken first), so the next offset is free.
-- PostgreSQL needs the types of the values a SELECT list inserts spelled out.

-- name: read_chunks
SELECT "offset", stream, seq, attempt, data, at FROM stream_chunks
WHERE workflow_id = :workflow_id AND stream = :stream AND "offset" > :after
ORDER BY "offset" LIMIT :limit;

-- name: digest_keys
-- Encryption at rest: the wrapped digest key; below, rekey's pages of values not sealed under
-- the current key (prefix is its tag; a column that only refers to a payloads row by its
-- 33-byte digest holds nothing to seal).
SELECT key_id, wrapped FROM digest_keys;

-- name: add_digest_key
INSERT INTO digest_keys (key_id, wrapped) VALUES (:key_id, :wrapped)
ON CONFLICT (key_id) DO NOTHING;

-- name: rekey_page_payloads_data
SELECT digest AS k0, data AS value FROM payloads
WHERE data IS NOT NULL AND substr(data, 1, :size) <> :prefix
LIMIT :limit;

-- name: rekey_payloads_data
UPDATE payloads SET data = :new WHERE digest = :k0 AND data = :old;

-- name: rekey_page_journal_input
SELECT id AS k0, input AS value FROM journal
WHERE input IS NOT NULL AND substr(input, 1, :size) <> :prefix
  AND NOT (substr(input, 1, 1) = :ref AND length(input) = 33)
LIMIT :limit;

-- name: rekey_journal_input
UPDATE journal SET input = :new WHERE id = :k0 AND input = :old;

-- name: rekey_page_journal_output
SELECT id AS k0, output AS value FROM journal
WHERE output IS NOT NULL AND substr(output, 1, :size) <> :prefix
  AND NOT (substr(output, 1, 1) = :ref AND length(output) = 33)
LIMIT :limit;

-- name: rekey_journal_output
UPDATE journal SET output = :new WHERE id = :k0 AND output = :old;

-- name: rekey_page_runs_input
SELECT workflow_id AS k0, input AS value FROM runs
WHERE input IS NOT NULL AND substr(input, 1, :size) <> :prefix
  AND NOT (substr(input, 1, 1) = :ref AND length(input) = 33)
LIMIT :limit;

-- name: rekey_runs_input
UPDATE runs SET input = :new WHERE workflow_id = :k0 AND input = :old;

-- name: rekey_page_runs_output
SELECT workflow_id AS k0, output AS value FROM runs
WHERE output IS NOT NULL AND substr(output, 1, :size) <> :prefix
  AND NOT (substr(output, 1, 1) = :ref AND length(output) = 33)
LIMIT :limit;

-- name: rekey_runs_output
UPDATE runs SET output = :new WHERE workflow_id = :k0 AND output = :old;

-- name: rekey_page_runs_progress
SELECT workflow_id AS k0, progress AS value FROM runs
WHERE progress IS NOT NULL AND substr(progress, 1, :size) <> :prefix
  AND NOT (substr(progress, 1, 1) = :ref AND length(progress) = 33)
LIMIT :limit;

-- name: rekey_runs_progress
UPDATE runs SET progress = :new WHERE workflow_id = :k0 AND progress = :old;

-- name: rekey_page_events_payload
SELECT id AS k0, payload AS value FROM events
WHERE payload IS NOT NULL AND substr(payload, 1, :size) <> :prefix
  AND NOT (substr(payload, 1, 1) = :ref AND length(payload) = 33)
LIMIT :limit;

-- name: rekey_events_payload
UPDATE events SET payload = :new WHERE id = :k0 AND payload = :old;

-- name: rekey_page_approvals_details
SELECT workflow_id AS k0, approval_id AS k1, details AS value FROM approvals
WHERE details IS NOT NULL AND substr(details, 1, :size) <> :prefix
  AND NOT (substr(details, 1, 1) = :ref AND length(details) = 33)
LIMIT :limit;

-- name: rekey_approvals_details
UPDATE approvals SET details = :new WHERE workflow_id = :k0 AND approval_id = :k1 AND details = :old;

-- name: rekey_page_shared_writes_value
SELECT key AS k0, version AS k1, value AS value FROM shared_writes
WHERE value IS NOT NULL AND substr(value, 1, :size) <> :prefix
  AND NOT (substr(value, 1, 1) = :ref AND length(value) = 33)
LIMIT :limit;

-- name: rekey_shared_writes_value
UPDATE shared_writes SET value = :new WHERE key = :k0 AND version = :k1 AND value = :old;

-- name: rekey_page_schedules_input
SELECT name AS k0, input AS value FROM schedules
WHERE input IS NOT NULL AND substr(input, 1, :size) <> :prefix
  AND NOT (substr(input, 1, 1) = :ref AND length(input) = 33)
LIMIT :limit;

-- name: rekey_schedules_input
UPDATE schedules SET input = :new WHERE name = :k0 AND input = :old;

-- name: rekey_page_snapshot_chunks_data
SELECT digest AS k0, data AS value FROM snapshot_chunks
WHERE substr(data, 1, :size) <> :prefix
LIMIT :limit;

-- name: rekey_snapshot_chunks_data
UPDATE snapshot_chunks SET data = :new WHERE digest = :k0 AND data = :old;

-- name: rekey_page_journal_error
SELECT id AS k0, error AS value FROM journal
WHERE error LIKE '%"message": "_%' AND error NOT LIKE :sealed_now
LIMIT :limit;

-- name: rekey_journal_error
UPDATE journal SET error = :new WHERE id = :k0 AND error = :old;

-- name: rekey_page_runs_error
SELECT workflow_id AS k0, error AS value FROM runs
WHERE error LIKE '%"message": "_%' AND error NOT LIKE :sealed_now
LIMIT :limit;

-- name: rekey_runs_error
UPDATE runs SET error = :new WHERE workflow_id = :k0 AND error = :old;

-- name: rekey_page_approvals_reason
SELECT workflow_id AS k0, approval_id AS k1, reason AS value FROM approvals
WHERE reason IS NOT NULL AND reason NOT LIKE :text_now
LIMIT :limit;

-- name: rekey_approvals_reason
UPDATE approvals SET reason = :new WHERE workflow_id = :k0 AND approval_id = :k1 AND reason = :old;

-- name: rekey_page_stream_chunks_data
SELECT workflow_id AS k0, stream AS k1, "offset" AS k2, data AS value FROM stream_chunks
WHERE substr(data, 1, :size) <> :prefix
LIMIT :limit;

-- name: rekey_stream_chunks_data
UPDATE stream_chunks SET data = :new
WHERE workflow_id = :k0 AND stream = :k1 AND "offset" = :k2 AND data = :old;

-- dialect: prunable_runs
-- Ended runs last changed before :before, oldest first, :status and :name optional, none of
-- the workflows named in :exclude (they keep runs for a retention of their own), none with a
-- child that has not ended (a detached one included). The IN list differs by dialect.

-- dialect: count_prunable
-- prunable_runs counted (a dry run).

-- dialect: delete_runs
-- The runs among :ids that are still prunable (the precondition read again where the delete
-- happens: a run redriven or given a new child since it was found is kept), returning those
-- deleted; the statements after it delete what the store keeps for them, in the same
-- transaction.

-- dialect: delete_journal
-- dialect: delete_events
-- dialect: delete_approvals
-- dialect: delete_run_spend
-- dialect: delete_run_calls
-- dialect: delete_run_spend_steps
-- dialect: delete_snapshot_uses
-- dialect: delete_snapshot_files
-- dialect: delete_snapshots
-- dialect: delete_stream_chunks

-- dialect: payload_graph
-- Every payloads row for the collector's mark: its digest, when it was last touched, its
-- head (a node or manifest whole, else its first 33 bytes: a piece's dictionary reference),
-- and refs (what a sealed row refers to).
-- The tag bytes are written as literals of each dialect.

-- dialect: payload_references
-- Every column value that refers to payload rows (tagged H, M, or a tree node), in every
-- table that keeps payloads apart.

-- dialect: payload_touched
-- When a row the collector is about to delete was last touched, read again in the deleting
-- transaction (PostgreSQL: locked FOR UPDATE, so a writer that would refresh it waits, then
-- stores it again).

-- name: delete_payload
DELETE FROM payloads WHERE digest = :digest;

-- dialect: unused_chunks
-- Snapshot chunks no use row names, stored before :before, up to :limit (PostgreSQL: locked,
-- skipping those a writer locked: it is recording a use of them).

-- name: delete_unused_chunk
-- Read again under the lock unused_chunks took: a use recorded before it is seen here.
DELETE FROM snapshot_chunks
WHERE digest = :digest AND NOT EXISTS (SELECT 1 FROM snapshot_uses u WHERE u.digest = snapshot_chunks.digest);

-- name: count_ingress
-- Add to a subscription's counts (its row created on first use, its kind and target kept
-- up to date with the code that counts).
INSERT INTO ingress_sources (name, kind, target, accepted, rejected, updated_at)
VALUES (:name, :kind, :target, :accepted, :rejected, :now)
ON CONFLICT (name) DO UPDATE SET accepted = ingress_sources.accepted + excluded.accepted,
                                 rejected = ingress_sources.rejected + excluded.rejected,
                                 kind = excluded.kind, target = excluded.target,
                                 updated_at = excluded.updated_at;

-- name: list_ingress
SELECT name, kind, target, accepted, rejected, updated_at FROM ingress_sources ORDER BY name;
-- dialect: stats_started
-- The runs created per bucket of the overview's window: a range of runs_by_created_name (0025;
-- runs_by_created before 0027). The bucket
-- is the whole number of widths since :since: CAST truncates on SQLite (the value is never
-- negative here), PostgreSQL's rounds, so it takes floor() first.

-- dialect: stats_finished
-- The runs that ended per bucket, by status: a range of runs_ended (0025), which holds the
-- ended runs only, by the time they last changed (when they ended). Bucketed as stats_started;
-- SQLite names the index (INDEXED BY): without statistics its planner prefers a status
-- index, which reads every ended run.

-- name: stats_steps
-- Step attempts since :since by step name (retry markers, attempt 0, and reused rows left
-- out), how many failed and how many are timed: a range of journal_steps (0025), which holds
-- the step rows only and every column read here, aggregated where it is read. An attempt is
-- timed when it lasted longer than nothing: one a crash interrupted before its holder was seen
-- alive again is journaled with no real duration (finished_at = started_at), as is an operator's
-- settlement, and neither says how long the step takes.
-- In-doubt rows are counted apart (doubts): only when there are some does the store ask
-- stats_steps_in_doubt which of them no row settles yet.
SELECT name, sum(CASE WHEN status = 'in_doubt' THEN 0 ELSE 1 END) AS attempts,
       sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failures,
       sum(CASE WHEN status <> 'in_doubt' AND finished_at > started_at THEN 1 ELSE 0 END) AS timed,
       sum(CASE WHEN status = 'in_doubt' THEN 1 ELSE 0 END) AS doubts
FROM journal
WHERE kind = 'step' AND started_at >= :since AND attempt > 0
  AND status IN ('completed', 'failed', 'in_doubt')
GROUP BY name
ORDER BY name;

-- name: stats_steps_in_doubt
-- The in-doubt attempts since :since by step name (an irreversible step killed mid-call, or
-- abandoned after its timeout) that no completed or failed row of the same attempt settles yet
-- (a settled one is counted by stats_steps, once). In-doubt rows are rare: the range of
-- journal_steps finds them, journal_by_run the settling rows of their run.
SELECT journal.name, count(*) AS attempts
FROM journal
WHERE journal.kind = 'step' AND journal.started_at >= :since AND journal.attempt > 0
  AND journal.status = 'in_doubt'
  AND NOT EXISTS (
    SELECT 1 FROM journal s
    WHERE s.workflow_id = journal.workflow_id AND s.kind = 'step' AND s.seq = journal.seq
      AND s.attempt = journal.attempt AND s.status IN ('completed', 'failed'))
GROUP BY journal.name;

-- name: stats_step_times
-- The durations of the timed attempts stats_steps counts, every :every-th by id (1: all of
-- them), from the same index range; :name (when given) only that step's. The store takes the
-- percentiles of what this answers.
SELECT name, finished_at - started_at AS took
FROM journal
WHERE kind = 'step' AND started_at >= :since AND attempt > 0
  AND status IN ('completed', 'failed') AND finished_at > started_at
  AND id % :every = 0 AND (:name IS NULL OR name = :name);

-- dialect: stats_workflows
-- The runs created since :since by workflow name, with what their attempts recorded so far
-- (run_spend, one row a run by its key), from a range of runs_by_created_name (0025), which
-- carries the name and key, so no run row is read. SQLite names the index (INDEXED BY): without
-- statistics its planner walks every run in runs_by_name_status to group by name unsorted.
