-- What each run's attempts used so far, kept with the run as its journal grows, so a budget
-- check and app.usage read one row instead of the whole journal. A trigger on the journal
-- keeps the totals, so every way an entry is journaled (an attempt, a retry's marker, a
-- fork's copies, an older worker's append) counts in the transaction that journals it; the
-- rules are those app.usage applied to the journal (docs/retries.md, "What model calls use"): step and compensation
-- attempts (attempt 0 is a retry's marker, no attempt), completed and failed ones counted as
-- attempts, an in_doubt one's usage counted where it was recorded. run_spend_steps says, per
-- step name, whether an attempt of it was interrupted with its usage lost and whether one
-- recorded usage (both: the totals are partial). budget_entry is the last operator retry
-- that may carry a budget. A run whose budget caps repeated calls (max_repeats) has its calls
-- counted too (counts_calls, set by its first invocation, which copies the calls journaled
-- before): run_calls holds one row per call (a position) by step name and stored input, so
-- the calls of one step with the same arguments are a range of its key. Runs journaled before
-- this migration are marked (since_start 0): their totals are counted from the journal, as
-- before. Expand-only: older code ignores the tables, and the triggers count what it
-- journals too.
CREATE TABLE run_spend (
    workflow_id   TEXT PRIMARY KEY,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost          REAL NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    budget_entry  INTEGER,
    since_start   INTEGER NOT NULL DEFAULT 1,
    counts_calls  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE run_calls (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    input       BLOB NOT NULL,
    position    TEXT NOT NULL,
    PRIMARY KEY (workflow_id, name, input, position)
) WITHOUT ROWID;
CREATE TABLE run_spend_steps (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0,
    recording   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow_id, name)
) WITHOUT ROWID;
INSERT INTO run_spend (workflow_id, since_start) SELECT workflow_id, 0 FROM runs;
-- Three triggers, each guarded by its WHEN clause, so an attempt that used nothing and was not
-- interrupted (the common one) runs only the first: its attempt counted, and its call if the
-- run counts calls. The second counts an attempt's usage and an attempt whose usage a crash
-- lost (an in_doubt entry with none, or a failure that says the attempt was interrupted,
-- unless an in_doubt entry since the seq's last outcome kept what it used); the third an
-- operator's retry that may give a budget. A step's run_spend_steps row exists once an
-- attempt of it was lost: only then does it matter that another attempt recorded usage, so
-- the common attempt only looks. The journal is searched only for a lost attempt.
-- A usage is JSON as Usage.to_json writes it (every release has).
CREATE TRIGGER journal_spend AFTER INSERT ON journal
WHEN NEW.kind IN ('step', 'compensation') AND NEW.attempt <> 0
  AND NEW.status IN ('completed', 'failed', 'in_doubt')
BEGIN
    INSERT INTO run_spend (workflow_id, input_tokens, output_tokens, cost, attempts)
    SELECT NEW.workflow_id,
           coalesce(json_extract(NEW.usage, '$.in'), 0),
           coalesce(json_extract(NEW.usage, '$.out'), 0),
           coalesce(json_extract(NEW.usage, '$.cost'), 0),
           NEW.status <> 'in_doubt'
    WHERE true
    ON CONFLICT (workflow_id) DO UPDATE SET
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        cost = cost + excluded.cost,
        attempts = attempts + excluded.attempts;
    INSERT OR IGNORE INTO run_calls (workflow_id, name, input, position)
    SELECT NEW.workflow_id, NEW.name, NEW.input, NEW.position
    WHERE NEW.kind = 'step' AND NEW.attempt <> 0 AND NEW.status IN ('completed', 'failed')
      AND NEW.input IS NOT NULL AND NEW.position IS NOT NULL
      AND (SELECT counts_calls FROM run_spend WHERE workflow_id = NEW.workflow_id) = 1;
END;
CREATE TRIGGER journal_spend_lost AFTER INSERT ON journal
WHEN NEW.kind IN ('step', 'compensation') AND NEW.attempt <> 0
  AND (NEW.usage IS NOT NULL OR NEW.status = 'in_doubt' OR NEW.error IS NOT NULL)
BEGIN
    UPDATE run_spend_steps SET recording = 1
    WHERE NEW.usage IS NOT NULL AND NEW.kind <> 'operator' AND NEW.attempt <> 0
      AND workflow_id = NEW.workflow_id AND name = NEW.name AND recording = 0;
    INSERT INTO run_spend_steps (workflow_id, name, interrupted, recording)
    SELECT NEW.workflow_id, NEW.name, 1, EXISTS (
        SELECT 1 FROM journal r
        WHERE r.workflow_id = NEW.workflow_id AND r.name = NEW.name AND r.id < NEW.id
          AND r.kind IN ('step', 'compensation') AND r.attempt <> 0
          AND r.status IN ('completed', 'failed', 'in_doubt') AND r.usage IS NOT NULL)
    WHERE NEW.kind <> 'operator' AND NEW.attempt <> 0 AND (
        (NEW.status = 'in_doubt' AND NEW.usage IS NULL)
        OR (NEW.status IN ('completed', 'failed') AND NEW.error LIKE '%AttemptInterrupted%'
            AND json_extract(NEW.error, '$.type') = 'AttemptInterrupted'
            AND NOT EXISTS (
                SELECT 1 FROM journal d
                WHERE d.workflow_id = NEW.workflow_id AND d.seq = NEW.seq AND d.id < NEW.id
                  AND d.kind IN ('step', 'compensation') AND d.attempt <> 0
                  AND d.status = 'in_doubt' AND d.usage IS NOT NULL
                  AND NOT EXISTS (
                      SELECT 1 FROM journal e
                      WHERE e.workflow_id = NEW.workflow_id AND e.seq = NEW.seq
                        AND e.id > d.id AND e.id < NEW.id
                        AND e.kind IN ('step', 'compensation') AND e.attempt <> 0
                        AND e.status IN ('completed', 'failed')))))
    ON CONFLICT (workflow_id, name) DO UPDATE SET interrupted = 1;
END;
CREATE TRIGGER journal_spend_budget AFTER INSERT ON journal
WHEN NEW.kind = 'operator' AND NEW.name = 'retry' AND NEW.input IS NOT NULL
BEGIN
    INSERT INTO run_spend (workflow_id, budget_entry)
    SELECT NEW.workflow_id, NEW.id
    WHERE (substr(NEW.input, 1, 1) <> CAST('J' AS BLOB)
           OR instr(NEW.input, CAST('"budget"' AS BLOB)) > 0)
    ON CONFLICT (workflow_id) DO UPDATE SET budget_entry = excluded.budget_entry;
END;
