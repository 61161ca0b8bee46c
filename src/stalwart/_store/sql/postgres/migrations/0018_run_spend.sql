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
-- before. Expand-only: older code ignores the tables, and the trigger counts what it
-- journals too.
CREATE TABLE run_spend (
    workflow_id   TEXT PRIMARY KEY,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cost          DOUBLE PRECISION NOT NULL DEFAULT 0,
    attempts      BIGINT NOT NULL DEFAULT 0,
    budget_entry  BIGINT,
    since_start   INTEGER NOT NULL DEFAULT 1,
    counts_calls  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE run_calls (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    input       BYTEA NOT NULL,
    position    TEXT NOT NULL,
    PRIMARY KEY (workflow_id, name, input, position)
);
CREATE TABLE run_spend_steps (
    workflow_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0,
    recording   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow_id, name)
);
INSERT INTO run_spend (workflow_id, since_start) SELECT workflow_id, 0 FROM runs;

CREATE FUNCTION stalwart_json_or_null(text TEXT) RETURNS JSONB
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN text::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END;
$$;

CREATE FUNCTION stalwart_journal_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    used JSONB;
    lost BOOLEAN := FALSE;
    counting INTEGER;
BEGIN
    IF NEW.kind = 'operator' THEN
        IF NEW.name = 'retry' AND NEW.input IS NOT NULL
           AND (substring(NEW.input FROM 1 FOR 1) <> 'J'::bytea
                OR position('"budget"'::bytea IN NEW.input) > 0) THEN
            INSERT INTO run_spend (workflow_id, budget_entry) VALUES (NEW.workflow_id, NEW.id)
            ON CONFLICT (workflow_id) DO UPDATE SET budget_entry = excluded.budget_entry;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.attempt IS NULL OR NEW.attempt = 0
       OR NEW.status NOT IN ('completed', 'failed', 'in_doubt') THEN
        RETURN NULL;
    END IF;
    IF NEW.usage IS NOT NULL THEN
        used := stalwart_json_or_null(NEW.usage);
    END IF;
    INSERT INTO run_spend (workflow_id, input_tokens, output_tokens, cost, attempts)
    VALUES (
        NEW.workflow_id,
        CASE WHEN jsonb_typeof(used -> 'in') = 'number' THEN (used ->> 'in')::BIGINT ELSE 0 END,
        CASE WHEN jsonb_typeof(used -> 'out') = 'number' THEN (used ->> 'out')::BIGINT ELSE 0 END,
        CASE WHEN jsonb_typeof(used -> 'cost') = 'number' THEN (used ->> 'cost')::FLOAT8 ELSE 0 END,
        CASE WHEN NEW.status <> 'in_doubt' THEN 1 ELSE 0 END
    )
    ON CONFLICT (workflow_id) DO UPDATE SET
        input_tokens = run_spend.input_tokens + excluded.input_tokens,
        output_tokens = run_spend.output_tokens + excluded.output_tokens,
        cost = run_spend.cost + excluded.cost,
        attempts = run_spend.attempts + excluded.attempts
    RETURNING counts_calls INTO counting;
    IF counting = 1 AND NEW.kind = 'step' AND NEW.status <> 'in_doubt'
       AND NEW.input IS NOT NULL AND NEW.position IS NOT NULL THEN
        INSERT INTO run_calls (workflow_id, name, input, position)
        VALUES (NEW.workflow_id, NEW.name, NEW.input, NEW.position)
        ON CONFLICT DO NOTHING;
    END IF;
    IF NEW.usage IS NOT NULL THEN
        -- a step's row exists once an attempt of it was lost: only then does this matter, so
        -- the common attempt only looks
        UPDATE run_spend_steps SET recording = 1
        WHERE workflow_id = NEW.workflow_id AND name = NEW.name AND recording = 0;
    END IF;
    IF NEW.status = 'in_doubt' THEN
        lost := NEW.usage IS NULL;
    ELSIF NEW.error LIKE '%AttemptInterrupted%'
          AND stalwart_json_or_null(NEW.error) ->> 'type' = 'AttemptInterrupted' THEN
        -- unless an in_doubt entry since the seq's last outcome kept what it used (the rare
        -- case the journal is searched for)
        lost := NOT EXISTS (
            SELECT 1 FROM journal d
            WHERE d.workflow_id = NEW.workflow_id AND d.seq = NEW.seq AND d.id < NEW.id
              AND d.kind IN ('step', 'compensation') AND d.attempt <> 0
              AND d.status = 'in_doubt' AND d.usage IS NOT NULL
              AND NOT EXISTS (
                  SELECT 1 FROM journal e
                  WHERE e.workflow_id = NEW.workflow_id AND e.seq = NEW.seq
                    AND e.id > d.id AND e.id < NEW.id
                    AND e.kind IN ('step', 'compensation') AND e.attempt <> 0
                    AND e.status IN ('completed', 'failed')));
    END IF;
    IF lost THEN  -- whether an earlier attempt of the step recorded usage (rare: searched)
        INSERT INTO run_spend_steps (workflow_id, name, interrupted, recording)
        VALUES (NEW.workflow_id, NEW.name, 1, (EXISTS (
            SELECT 1 FROM journal r
            WHERE r.workflow_id = NEW.workflow_id AND r.name = NEW.name AND r.id < NEW.id
              AND r.kind IN ('step', 'compensation') AND r.attempt <> 0
              AND r.status IN ('completed', 'failed', 'in_doubt')
              AND r.usage IS NOT NULL))::INTEGER)
        ON CONFLICT (workflow_id, name) DO UPDATE SET interrupted = 1;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER journal_spend AFTER INSERT ON journal
FOR EACH ROW WHEN (NEW.kind IN ('step', 'compensation', 'operator'))
EXECUTE FUNCTION stalwart_journal_spend();
